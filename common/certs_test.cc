#include "common/certs.h"

#include <dirent.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/obj_mac.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

struct X509Free {
  void operator()(X509* p) const { X509_free(p); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct NamesFree {
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

X509Ptr LoadCert(const std::string& path) {
  const std::string pem = ReadFile(path);
  std::unique_ptr<BIO, decltype(&BIO_free_all)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())),
                                                    &BIO_free_all);
  return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

PkeyPtr LoadKey(const std::string& path) {
  const std::string pem = ReadFile(path);
  std::unique_ptr<BIO, decltype(&BIO_free_all)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())),
                                                    &BIO_free_all);
  return PkeyPtr(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

int Mode(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return -1;
  return st.st_mode & 07777;
}

// A certificate with the given subject entries (field, value) and validity
// (seconds from now), signed by `signer` (self-signed when null) with
// `signer_key`; its key is a new P-256 key. Returns PEM.
std::string MakeCert(const std::vector<std::pair<std::string, std::string>>& subject, X509* signer,
                     EVP_PKEY* signer_key, long not_before, long not_after, PkeyPtr* key_out = nullptr) {
  PkeyPtr key(EVP_EC_gen("prime256v1"));
  X509Ptr cert(X509_new());
  X509_set_version(cert.get(), X509_VERSION_3);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 42);
  X509_NAME* name = X509_get_subject_name(cert.get());
  for (const auto& [field, value] : subject) {
    X509_NAME_add_entry_by_txt(name, field.c_str(), MBSTRING_UTF8,
                               reinterpret_cast<const unsigned char*>(value.c_str()), -1, -1, 0);
  }
  X509_set_issuer_name(cert.get(), signer ? X509_get_subject_name(signer) : name);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), not_before);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), not_after);
  X509_set_pubkey(cert.get(), key.get());
  X509_sign(cert.get(), signer ? signer_key : key.get(), EVP_sha256());
  std::unique_ptr<BIO, decltype(&BIO_free_all)> bio(BIO_new(BIO_s_mem()), &BIO_free_all);
  PEM_write_bio_X509(bio.get(), cert.get());
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  if (key_out != nullptr) *key_out = std::move(key);
  return std::string(data, n);
}

std::string KeyPem(EVP_PKEY* key) {
  std::unique_ptr<BIO, decltype(&BIO_free_all)> bio(BIO_new(BIO_s_mem()), &BIO_free_all);
  PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, n);
}

class CertsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    base_ = absl::StrCat(tmp ? tmp : "/tmp", "/certs_test_", getpid(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    dir_ = base_ + "/cluster";  // CreateCa makes the missing parent too
    ASSERT_TRUE(CreateCa(dir_).ok());
  }

  std::string Issue(const std::string& name, Role role, std::vector<std::string> hosts = {}) {
    IssueOptions o;
    o.name = name;
    o.role = role;
    o.hosts = std::move(hosts);
    absl::StatusOr<std::string> path = IssueCertificate(dir_, o);
    EXPECT_TRUE(path.ok()) << path.status();
    return path.value_or("");
  }
  std::string P(const std::string& file) const { return dir_ + "/" + file; }

  std::string base_, dir_;
};

TEST_F(CertsTest, IssuesIdentitiesThatCheckAndParse) {
  struct Case {
    std::string name;
    Role role;
    std::string file;
  };
  for (const Case& c :
       {Case{"/job:worker/task:1", Role::kCluster, "worker-1"}, Case{"master", Role::kCluster, "master"},
        Case{"alice", Role::kUser, "alice"}, Case{"root@example.com", Role::kAdmin, "root@example.com"}}) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(Issue(c.name, c.role), P(c.file + ".crt"));
    absl::StatusOr<PeerIdentity> id = IdentityFromPem(ReadFile(P(c.file + ".crt")));
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(id->name, c.name);
    EXPECT_EQ(id->role, c.role);
    id = CheckCredentialFiles(P("ca.crt"), P(c.file + ".crt"), P(c.file + ".key"));
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(id->name, c.name);
    EXPECT_EQ(id->role, c.role);
    EXPECT_EQ(Mode(P(c.file + ".key")), 0600);
    EXPECT_EQ(Mode(P(c.file + ".crt")), 0644);
  }
  EXPECT_EQ(Mode(dir_), 0700);
  EXPECT_EQ(Mode(P("ca.key")), 0600);
  EXPECT_EQ(Mode(P("ca.crt")), 0644);
  // No temporary file is left behind.
  std::vector<std::string> files;
  DIR* d = opendir(dir_.c_str());
  ASSERT_NE(d, nullptr);
  for (dirent* e = readdir(d); e != nullptr; e = readdir(d)) {
    if (e->d_name[0] != '.') files.push_back(e->d_name);
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files,
            (std::vector<std::string>{"alice.crt", "alice.key", "ca.crt", "ca.key", "master.crt", "master.key",
                                      "root@example.com.crt", "root@example.com.key", "worker-1.crt", "worker-1.key"}));
}

TEST_F(CertsTest, CertificateContents) {
  Issue("/job:ps/task:0", Role::kCluster, {"10.1.2.3", "ps-0.example.com", "::1", "*.svc.local"});
  Issue("master", Role::kCluster);
  Issue("bob", Role::kUser);
  X509Ptr ca = LoadCert(P("ca.crt"));
  X509Ptr ps = LoadCert(P("ps-0.crt"));
  ASSERT_NE(ca, nullptr);
  ASSERT_NE(ps, nullptr);

  std::unique_ptr<GENERAL_NAMES, NamesFree> names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(ps.get(), NID_subject_alt_name, nullptr, nullptr)));
  ASSERT_NE(names, nullptr);
  std::vector<std::string> dns;
  std::vector<std::string> ips;
  for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names.get(), i);
    const ASN1_STRING* s = n->type == GEN_DNS ? n->d.dNSName : n->d.iPAddress;
    std::string bytes(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)), ASN1_STRING_length(s));
    (n->type == GEN_DNS ? dns : ips).push_back(bytes);
  }
  EXPECT_EQ(dns, (std::vector<std::string>{"ps-0.example.com", "*.svc.local"}));
  EXPECT_EQ(ips, (std::vector<std::string>{std::string("\x0a\x01\x02\x03", 4),
                                           std::string("\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x01", 16)}));
  EXPECT_EQ(X509_check_host(ps.get(), "x.svc.local", 0, 0, nullptr), 1);
  EXPECT_EQ(X509_check_ip_asc(ps.get(), "10.1.2.3", 0), 1);
  EXPECT_EQ(X509_check_host(ps.get(), "localhost", 0, 0, nullptr), 0);

  absl::StatusOr<CertificateInfo> master = DescribeCertificate(ReadFile(P("master.crt")));
  ASSERT_TRUE(master.ok()) << master.status();
  EXPECT_EQ(master->dns_names, std::vector<std::string>{"localhost"});
  EXPECT_EQ(master->ip_addresses, std::vector<std::string>{"127.0.0.1"});
  EXPECT_EQ(master->subject, "CN=master,O=weft:cluster");
  EXPECT_EQ(master->issuer, "CN=weft cluster CA");
  EXPECT_FALSE(master->is_ca);
  const absl::Duration validity = master->not_after - master->not_before;
  EXPECT_GE(validity, absl::Hours(365 * 24));
  EXPECT_LE(validity, absl::Hours(365 * 24 + 1));
  absl::StatusOr<CertificateInfo> bob = DescribeCertificate(ReadFile(P("bob.crt")));
  ASSERT_TRUE(bob.ok());
  EXPECT_TRUE(bob->dns_names.empty() && bob->ip_addresses.empty());
  absl::StatusOr<CertificateInfo> ca_info = DescribeCertificate(ReadFile(P("ca.crt")));
  ASSERT_TRUE(ca_info.ok());
  EXPECT_TRUE(ca_info->is_ca);
  EXPECT_GE(ca_info->not_after - ca_info->not_before, absl::Hours(3650 * 24));

  // Keys, signatures, serials, usages.
  PkeyPtr key = LoadKey(P("ps-0.key"));
  ASSERT_NE(key, nullptr);
  EXPECT_TRUE(EVP_PKEY_is_a(key.get(), "EC"));
  char group[64] = "";
  EVP_PKEY_get_utf8_string_param(key.get(), "group", group, sizeof(group), nullptr);
  EXPECT_STREQ(group, "prime256v1");
  EXPECT_EQ(X509_get_signature_nid(ps.get()), NID_ecdsa_with_SHA256);
  EXPECT_EQ(X509_get_signature_nid(ca.get()), NID_ecdsa_with_SHA256);
  std::unique_ptr<BIGNUM, decltype(&BN_free)> serial(ASN1_INTEGER_to_BN(X509_get0_serialNumber(ps.get()), nullptr),
                                                     &BN_free);
  EXPECT_FALSE(BN_is_negative(serial.get()));
  EXPECT_GT(BN_num_bits(serial.get()), 64);
  EXPECT_LE(BN_num_bits(serial.get()), 128);
  EXPECT_GT(X509_check_ca(ca.get()), 0);
  EXPECT_EQ(X509_check_ca(ps.get()), 0);
  EXPECT_TRUE(X509_get_key_usage(ca.get()) & KU_KEY_CERT_SIGN);
  EXPECT_EQ(X509_get_key_usage(ps.get()), static_cast<uint32_t>(KU_DIGITAL_SIGNATURE));
  EXPECT_EQ(X509_get_extended_key_usage(ps.get()), static_cast<uint32_t>(XKU_SSL_SERVER | XKU_SSL_CLIENT));
  X509Ptr bob_cert = LoadCert(P("bob.crt"));
  EXPECT_EQ(X509_get_extended_key_usage(bob_cert.get()), static_cast<uint32_t>(XKU_SSL_CLIENT));
  EXPECT_NE(X509_get0_authority_key_id(ps.get()), nullptr);
  EXPECT_EQ(ASN1_OCTET_STRING_cmp(X509_get0_authority_key_id(ps.get()), X509_get0_subject_key_id(ca.get())), 0);
  EXPECT_EQ(X509_check_issued(ca.get(), ps.get()), X509_V_OK);
}

TEST_F(CertsTest, CheckCredentialFilesRefusesWrongFiles) {
  Issue("/job:worker/task:0", Role::kCluster);
  Issue("master", Role::kCluster);
  const std::string ca = P("ca.crt"), crt = P("worker-0.crt"), key = P("worker-0.key");

  // The key of another identity.
  absl::StatusOr<PeerIdentity> id = CheckCredentialFiles(ca, crt, P("master.key"));
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(id.status().message(), P("master.key"))) << id.status();
  EXPECT_TRUE(absl::StrContains(id.status().message(), "does not match certificate " + crt)) << id.status();

  // A certificate (and its own key) from a second CA.
  const std::string other = base_ + "/other";
  ASSERT_TRUE(CreateCa(other).ok());
  IssueOptions o;
  o.name = "/job:worker/task:0";
  ASSERT_TRUE(IssueCertificate(other, o).ok());
  id = CheckCredentialFiles(ca, other + "/worker-0.crt", other + "/worker-0.key");
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(id.status().message(),
                                absl::StrCat("certificate ", other, "/worker-0.crt was not signed by the CA in ", ca)))
      << id.status();
  // The other CA as the trust anchor for this cluster's certificate.
  id = CheckCredentialFiles(other + "/ca.crt", crt, key);
  EXPECT_TRUE(absl::StrContains(id.status().message(), "was not signed by the CA in " + other + "/ca.crt"));

  // Missing files, each named.
  for (const auto& [c, k, a, missing] : std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
           {crt, key, P("nope.crt"), P("nope.crt")},
           {P("gone.crt"), key, ca, P("gone.crt")},
           {crt, P("gone.key"), ca, P("gone.key")}}) {
    id = CheckCredentialFiles(a, c, k);
    EXPECT_EQ(id.status().code(), absl::StatusCode::kNotFound) << id.status();
    EXPECT_TRUE(absl::StrContains(id.status().message(), missing)) << id.status();
  }

  // Garbage in each position.
  const std::string garbage = P("garbage");
  WriteFile(garbage, "this is not PEM\n");
  for (const auto& [c, k, a, what] : std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
           {crt, key, garbage, "CA certificate " + garbage + " is not a PEM certificate"},
           {garbage, key, ca, "certificate " + garbage + " is not a PEM certificate"},
           {crt, garbage, ca, "private key " + garbage + " is not an unencrypted PEM private key"},
           {crt, crt, ca, "private key " + crt + " is not"}}) {
    id = CheckCredentialFiles(a, c, k);
    EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition) << id.status();
    EXPECT_TRUE(absl::StrContains(id.status().message(), what)) << id.status();
  }
  // A directory in place of a file.
  id = CheckCredentialFiles(dir_, crt, key);
  EXPECT_TRUE(absl::StrContains(id.status().message(), "CA certificate " + dir_)) << id.status();
}

TEST_F(CertsTest, CheckCredentialFilesChecksValidityAndIdentity) {
  X509Ptr ca = LoadCert(P("ca.crt"));
  PkeyPtr ca_key = LoadKey(P("ca.key"));
  ASSERT_TRUE(ca && ca_key);
  struct Case {
    std::vector<std::pair<std::string, std::string>> subject;
    long not_before, not_after;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{{"O", "weft:cluster"}, {"CN", "master"}}, -86400 * 2, -86400, "expired at"},
      {{{"O", "weft:cluster"}, {"CN", "master"}}, 86400, 86400 * 2, "is not valid before"},
      {{{"O", "weft:cluster"}, {"CN", "alice"}}, -60, 86400, "is not a weft identity"},
      {{{"CN", "master"}}, -60, 86400, "has no O"},
  };
  int n = 0;
  for (const Case& c : cases) {
    PkeyPtr key;
    const std::string crt = P(absl::StrCat("made-", n, ".crt")), key_file = P(absl::StrCat("made-", n++, ".key"));
    WriteFile(crt, MakeCert(c.subject, ca.get(), ca_key.get(), c.not_before, c.not_after, &key));
    WriteFile(key_file, KeyPem(key.get()));
    absl::StatusOr<PeerIdentity> id = CheckCredentialFiles(P("ca.crt"), crt, key_file);
    EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition) << id.status();
    EXPECT_TRUE(absl::StrContains(id.status().message(), crt)) << id.status();
    EXPECT_TRUE(absl::StrContains(id.status().message(), c.want)) << id.status();
  }
}

TEST_F(CertsTest, IdentityFromPemRefusesNonIdentities) {
  using Subject = std::vector<std::pair<std::string, std::string>>;
  const std::vector<std::pair<Subject, std::string>> cases = {
      {{{"O", "weft:cluster"}}, "no CN"},
      {{{"CN", "master"}}, "no O"},
      {{{"O", "weft:root"}, {"CN", "alice"}}, "\"weft:root\" is not weft:cluster"},
      {{{"O", "weft:cluster"}, {"CN", "alice"}}, "must be master or /job:NAME/task:N"},
      {{{"O", "weft:cluster"}, {"CN", "/job:w/task:01"}}, "must be master"},
      {{{"O", "weft:user"}, {"CN", "/job:w/task:0"}}, "is not a valid user name"},
      {{{"O", "weft:admin"}, {"CN", "master"}}, "is not a valid user name"},
      {{{"O", "weft:user"}, {"CN", "a"}, {"CN", "b"}}, "more than one CN"},
      {{{"O", "weft:user"}, {"O", "weft:admin"}, {"CN", "a"}}, "more than one O"},
  };
  for (const auto& [subject, want] : cases) {
    absl::StatusOr<PeerIdentity> id = IdentityFromPem(MakeCert(subject, nullptr, nullptr, -60, 3600));
    EXPECT_EQ(id.status().code(), absl::StatusCode::kUnauthenticated) << want;
    EXPECT_TRUE(absl::StrContains(id.status().message(), want)) << id.status();
  }
  EXPECT_EQ(IdentityFromPem("garbage").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(IdentityFromPem("").status().code(), absl::StatusCode::kUnauthenticated);
  // The CA certificate is no identity (no O).
  EXPECT_TRUE(absl::StrContains(IdentityFromPem(ReadFile(P("ca.crt"))).status().message(), "no O"));
}

TEST_F(CertsTest, RefusesToOverwrite) {
  const std::string ca_pem = ReadFile(P("ca.crt"));
  absl::Status s = CreateCa(dir_);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(absl::StrContains(s.message(), P("ca.crt"))) << s;
  EXPECT_EQ(ReadFile(P("ca.crt")), ca_pem);

  const std::string first = ReadFile(Issue("/job:worker/task:3", Role::kCluster));
  IssueOptions o;
  o.name = "/job:worker/task:3";
  absl::StatusOr<std::string> again = IssueCertificate(dir_, o);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(absl::StrContains(again.status().message(), P("worker-3.crt"))) << again.status();
  EXPECT_EQ(ReadFile(P("worker-3.crt")), first);

  // Only the key is left: still refused, naming the key.
  ASSERT_EQ(unlink(P("worker-3.crt").c_str()), 0);
  again = IssueCertificate(dir_, o);
  EXPECT_TRUE(absl::StrContains(again.status().message(), P("worker-3.key"))) << again.status();

  o.overwrite = true;
  ASSERT_TRUE(IssueCertificate(dir_, o).ok());
  EXPECT_NE(ReadFile(P("worker-3.crt")), first);
  EXPECT_TRUE(CheckCredentialFiles(P("ca.crt"), P("worker-3.crt"), P("worker-3.key")).ok());
  EXPECT_EQ(Mode(P("worker-3.key")), 0600);

  ASSERT_TRUE(CreateCa(dir_, 3650, /*overwrite=*/true).ok());
  EXPECT_NE(ReadFile(P("ca.crt")), ca_pem);
  // The old certificates no longer chain to the new CA.
  EXPECT_FALSE(CheckCredentialFiles(P("ca.crt"), P("worker-3.crt"), P("worker-3.key")).ok());
}

TEST_F(CertsTest, NamesAndFileBases) {
  EXPECT_EQ(CertFileBase("master").value_or(""), "master");
  EXPECT_EQ(CertFileBase("/job:worker/task:1").value_or(""), "worker-1");
  EXPECT_EQ(CertFileBase("/job:my_job-2/task:10").value_or(""), "my_job-2-10");
  EXPECT_EQ(CertFileBase("alice").value_or(""), "alice");
  EXPECT_EQ(CertFileBase("a.b_c@d-e").value_or(""), "a.b_c@d-e");
  for (const std::string& bad : std::vector<std::string>{
           "", "/job:Worker/task:1", "/job:w/task:01", "/job:w/task:-1", "/job:w/task:", "/job:/task:1",
           "/job:w/task:1/x", "/job:w/replica:0/task:1", "/master", "-alice", ".alice", "al ice", "a/b", "ca", "../x",
           std::string(65, 'a'), "/job:" + std::string(60, 'w') + "/task:1"}) {
    EXPECT_EQ(CertFileBase(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(CertFileBase(std::string(64, 'a')).ok());

  IssueOptions o;
  o.name = "master";
  o.role = Role::kUser;
  absl::StatusOr<std::string> r = IssueCertificate(dir_, o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "\"master\" is a cluster member")) << r.status();
  o.name = "alice";
  o.role = Role::kCluster;
  r = IssueCertificate(dir_, o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "\"alice\" is a user name")) << r.status();
  o.role = Role::kUser;
  o.days = 0;
  EXPECT_EQ(IssueCertificate(dir_, o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateCa(base_ + "/x", -1).code(), absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(ParseRole("admin").value_or(Role::kUser), Role::kAdmin);
  EXPECT_FALSE(ParseRole("root").ok());
  EXPECT_EQ(RoleName(Role::kCluster), "cluster");
}

TEST_F(CertsTest, HostsAreChecked) {
  IssueOptions o;
  o.name = "/job:worker/task:0";
  for (const std::string& bad :
       std::vector<std::string>{"", "a..b", "-a.com", "a-.com", "foo_bar.com", "1.2.3", "256.1.1.1", "[::1]", "a.*.com",
                                "*", "*.", "fe80::1%eth0", "host name", "a.com."}) {
    o.hosts = {"localhost", bad};
    absl::StatusOr<std::string> r = IssueCertificate(dir_, o);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(r.status().message(), absl::StrCat("host \"", bad, "\""))) << r.status();
  }
  EXPECT_EQ(access(P("worker-0.crt").c_str(), F_OK), -1);
  o.hosts = {"2001:db8::1", "WORKER-0.Example.COM", "*.a", "x1"};
  EXPECT_TRUE(IssueCertificate(dir_, o).ok());
}

TEST_F(CertsTest, MissingOrBrokenCa) {
  IssueOptions o;
  o.name = "alice";
  o.role = Role::kUser;
  absl::StatusOr<std::string> r = IssueCertificate(base_ + "/empty", o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(r.status().message(), base_ + "/empty/ca.crt")) << r.status();

  Issue("master", Role::kCluster);
  ASSERT_EQ(rename(P("master.key").c_str(), P("ca.key").c_str()), 0);
  r = IssueCertificate(dir_, o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "does not match CA certificate " + P("ca.crt"))) << r.status();
}

// `openssl verify` agrees, where the command is installed.
TEST_F(CertsTest, OpensslCommandVerifies) {
  if (access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/openssl";
  Issue("/job:worker/task:0", Role::kCluster, {"127.0.0.1", "worker-0.local"});
  Issue("carol", Role::kUser);
  const std::string other = base_ + "/other";
  ASSERT_TRUE(CreateCa(other).ok());
  auto verify = [&](const std::string& ca, const std::string& crt, const std::string& extra) {
    return std::system(
        absl::StrCat("/usr/bin/openssl verify ", extra, " -CAfile '", ca, "' '", crt, "' >/dev/null 2>&1").c_str());
  };
  EXPECT_EQ(verify(P("ca.crt"), P("worker-0.crt"), "-purpose sslserver -verify_hostname worker-0.local"), 0);
  EXPECT_EQ(verify(P("ca.crt"), P("worker-0.crt"), "-purpose sslclient -verify_ip 127.0.0.1"), 0);
  EXPECT_EQ(verify(P("ca.crt"), P("carol.crt"), "-purpose sslclient"), 0);
  EXPECT_NE(verify(P("ca.crt"), P("carol.crt"), "-purpose sslserver"), 0);
  EXPECT_NE(verify(other + "/ca.crt", P("worker-0.crt"), ""), 0);
  EXPECT_EQ(std::system(absl::StrCat("/usr/bin/openssl pkey -noout -in '", P("worker-0.key"), "'").c_str()), 0);
}

}  // namespace
}  // namespace weft
