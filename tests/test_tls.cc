#include "tests/test_tls.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "client/grpc_client_auth.h"

namespace weft {
namespace testing {

absl::StatusOr<TestTls> TestTls::Create(const std::string& dir) {
  ::mkdir(dir.c_str(), 0700);
  absl::Status s = CreateCa(dir, /*days=*/2, /*overwrite=*/true, "weft test CA");
  if (!s.ok()) return s;
  return TestTls(dir);
}

absl::StatusOr<std::pair<std::string, std::string>> TestTls::Issue(const std::string& name, Role role) {
  absl::StatusOr<std::string> base = CertFileBase(name);
  if (!base.ok()) return base.status();
  const std::string cert = absl::StrCat(dir_, "/", *base, ".crt");
  const std::string key = absl::StrCat(dir_, "/", *base, ".key");
  if (issued_.count(name) > 0) return std::make_pair(cert, key);
  IssueOptions o;
  o.overwrite = true;  // files of an earlier fixture's CA
  o.name = name;
  o.role = role;
  o.days = 2;
  if (role == Role::kCluster) o.hosts = {"127.0.0.1", "localhost"};
  absl::StatusOr<std::string> issued = IssueCertificate(dir_, o);
  if (!issued.ok()) return issued.status();
  issued_.insert(name);
  return std::make_pair(cert, key);
}

std::vector<std::string> TestTls::DaemonFlags(const std::string& identity) {
  absl::StatusOr<std::pair<std::string, std::string>> files = Issue(identity, Role::kCluster);
  if (!files.ok()) {
    std::fprintf(stderr, "TestTls: %s\n", files.status().ToString().c_str());
    std::abort();  // a broken test setup, not a result
  }
  return {"--ca=" + ca(), "--cert=" + files->first, "--key=" + files->second};
}

namespace {
std::string ReadWhole(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
}  // namespace

std::shared_ptr<grpc::ChannelCredentials> TestTls::DaemonCredentials(const std::string& identity,
                                                                     const std::string& trusted_ca_file) {
  absl::StatusOr<std::pair<std::string, std::string>> files = Issue(identity, Role::kCluster);
  if (!files.ok()) {
    std::fprintf(stderr, "TestTls: %s\n", files.status().ToString().c_str());
    std::abort();  // a broken test setup, not a result
  }
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ReadWhole(trusted_ca_file.empty() ? ca() : trusted_ca_file);
  o.pem_cert_chain = ReadWhole(files->first);
  o.pem_private_key = ReadWhole(files->second);
  return grpc::SslCredentials(o);
}

absl::StatusOr<std::pair<std::string, std::string>> TestTls::User(const std::string& name, Role role) {
  return Issue(name, role);
}

MasterClientOptions TestTls::ClientOptions(const std::string& user, Role role) {
  MasterClientOptions options;
  absl::StatusOr<std::pair<std::string, std::string>> files = Issue(user, role);
  if (!files.ok()) {
    std::fprintf(stderr, "TestTls: %s\n", files.status().ToString().c_str());
    std::abort();
  }
  ClientCredentialFiles c;
  c.ca = ca();
  c.cert = files->first;
  c.key = files->second;
  auto creds = ClientChannelCredentials(c);
  if (!creds.ok()) {
    std::fprintf(stderr, "TestTls: %s\n", creds.status().ToString().c_str());
    std::abort();
  }
  options.credentials = *creds;
  return options;
}

}  // namespace testing
}  // namespace weft
