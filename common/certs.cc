#include "common/certs.h"


#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/certs_internal.h"

namespace weft {

using certs_internal::AddExtension;
using certs_internal::AddSubjectAltNames;
using certs_internal::BignumPtr;
using certs_internal::CaPair;
using certs_internal::CheckDays;
using certs_internal::CheckHost;
using certs_internal::ErrorQueueScope;
using certs_internal::FdCloser;
using certs_internal::GeneralNamesPtr;
using certs_internal::IdentityOf;
using certs_internal::IsUserName;
using certs_internal::JoinPath;
using certs_internal::LoadCa;
using certs_internal::MakeDirs;
using certs_internal::NameText;
using certs_internal::NewCertificate;
using certs_internal::NewKey;
using certs_internal::OpensslFree;
using certs_internal::OrgOf;
using certs_internal::ParseCertificate;
using certs_internal::ParsePrivateKey;
using certs_internal::PkeyPtr;
using certs_internal::Quote;
using certs_internal::RefuseExisting;
using certs_internal::Sign;
using certs_internal::SslErrors;
using certs_internal::StoreCtxPtr;
using certs_internal::StorePtr;
using certs_internal::TaskFileBase;
using certs_internal::TimeOf;
using certs_internal::VerifyError;
using certs_internal::Wipe;
using certs_internal::WritePair;
using certs_internal::X509Ptr;
using certs_internal::kMaxNameLength;
using certs_internal::kMaxPemFileBytes;
std::string RoleName(Role r) {
  switch (r) {
    case Role::kCluster:
      return "cluster";
    case Role::kUser:
      return "user";
    case Role::kAdmin:
      return "admin";
  }
  return "unknown";
}

absl::StatusOr<Role> ParseRole(absl::string_view name) {
  for (Role r : {Role::kCluster, Role::kUser, Role::kAdmin}) {
    if (name == RoleName(r)) return r;
  }
  return absl::InvalidArgumentError(absl::StrCat("role ", Quote(name), " is not cluster, user or admin"));
}

bool IsClusterName(absl::string_view name) {
  std::string base;
  return name == "master" || TaskFileBase(name, &base);
}

absl::StatusOr<std::string> CertFileBase(const std::string& name) {
  if (name == "master") return name;
  std::string base;
  if (TaskFileBase(name, &base)) return base;
  if (name.empty()) return absl::InvalidArgumentError("the identity name is empty");
  if (name[0] == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("name ", Quote(name),
                     " is not a task name: want /job:NAME/task:N, NAME matching "
                     "[a-z][a-z0-9_-]*, N a non-negative integer without leading zeros, at most ",
                     kMaxNameLength, " characters in all"));
  }
  if (name == "ca") {
    return absl::InvalidArgumentError("name \"ca\" is reserved: ca.crt and ca.key are the CA's files");
  }
  if (!IsUserName(name)) {
    return absl::InvalidArgumentError(absl::StrCat("name ", Quote(name),
                                                   " is not master, a task name (/job:NAME/task:N) or a user name "
                                                   "([A-Za-z0-9][A-Za-z0-9._@-]{0,63})"));
  }
  return name;
}

absl::StatusOr<std::string> ReadPemFile(const std::string& path, absl::string_view what) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(what, " ", path, " does not exist"));
    return absl::FailedPreconditionError(absl::StrCat(what, " ", path, " cannot be read: ", std::strerror(err)));
  }
  const FdCloser closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(what, " ", path, " is not a regular file"));
  }
  if (st.st_size > kMaxPemFileBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", path, " is ", st.st_size, " bytes, too large for a PEM file"));
  }
  std::string data;
  char buf[8192];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::FailedPreconditionError(absl::StrCat(what, " ", path, " cannot be read: ", std::strerror(errno)));
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > static_cast<size_t>(kMaxPemFileBytes)) {
      return absl::FailedPreconditionError(absl::StrCat(what, " ", path, " is too large for a PEM file"));
    }
  }
  OPENSSL_cleanse(buf, sizeof(buf));
  return data;
}

absl::Status CreateCa(const std::string& dir, int days, bool overwrite, const std::string& common_name) {
  ErrorQueueScope errors;
  RETURN_IF_ERROR(CheckDays(days));
  if (common_name.empty() || common_name.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("CA name ", Quote(common_name), " must have 1 to ", kMaxNameLength, " characters"));
  }
  const std::string cert_path = JoinPath(dir, "ca.crt");
  const std::string key_path = JoinPath(dir, "ca.key");
  if (!overwrite) RETURN_IF_ERROR(RefuseExisting({cert_path, key_path}));
  RETURN_IF_ERROR(MakeDirs(dir));
  ASSIGN_OR_RETURN(PkeyPtr key, NewKey());
  ASSIGN_OR_RETURN(X509Ptr cert, NewCertificate(key.get(), common_name, nullptr, days));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get())) != 1) {
    return absl::InternalError(absl::StrCat("cannot set the CA's issuer", SslErrors()));
  }
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  // pathlen:0: the CA signs leaves only, never another CA.
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_key_usage, "critical,keyCertSign,cRLSign"));
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_subject_key_identifier, "hash"));
  RETURN_IF_ERROR(Sign(cert.get(), key.get()));
  return WritePair(dir, cert_path, cert.get(), key_path, key.get(), overwrite);
}

absl::StatusOr<std::string> IssueCertificate(const std::string& dir, const IssueOptions& options) {
  ErrorQueueScope errors;
  ASSIGN_OR_RETURN(const std::string base, CertFileBase(options.name));
  const bool cluster = IsClusterName(options.name);
  if (cluster && options.role != Role::kCluster) {
    return absl::InvalidArgumentError(absl::StrCat(
        Quote(options.name), " is a cluster member, so its role is cluster, not ", RoleName(options.role)));
  }
  if (!cluster && options.role == Role::kCluster) {
    return absl::InvalidArgumentError(absl::StrCat(Quote(options.name),
                                                   " is a user name, so its role is user or admin; "
                                                   "role cluster is for master and /job:NAME/task:N"));
  }
  RETURN_IF_ERROR(CheckDays(options.days));
  std::vector<std::string> hosts = options.hosts;
  if (hosts.empty() && cluster) hosts = {"localhost", "127.0.0.1"};
  for (const std::string& host : hosts) RETURN_IF_ERROR(CheckHost(host));

  ASSIGN_OR_RETURN(CaPair ca, LoadCa(dir));
  const std::string cert_path = JoinPath(dir, base + ".crt");
  const std::string key_path = JoinPath(dir, base + ".key");
  if (!options.overwrite) RETURN_IF_ERROR(RefuseExisting({cert_path, key_path}));

  ASSIGN_OR_RETURN(PkeyPtr key, NewKey());
  ASSIGN_OR_RETURN(X509Ptr cert, NewCertificate(key.get(), options.name, OrgOf(options.role), options.days));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(ca.cert.get())) != 1) {
    return absl::InternalError(absl::StrCat("cannot set the issuer", SslErrors()));
  }
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, ca.cert.get(), cert.get(), nullptr, nullptr, 0);
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_basic_constraints, "critical,CA:FALSE"));
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_key_usage, "critical,digitalSignature"));
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_ext_key_usage, cluster ? "serverAuth,clientAuth" : "clientAuth"));
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_subject_key_identifier, "hash"));
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_authority_key_identifier, "keyid:always"));
  if (!hosts.empty()) RETURN_IF_ERROR(AddSubjectAltNames(cert.get(), hosts));
  RETURN_IF_ERROR(Sign(cert.get(), ca.key.get()));
  RETURN_IF_ERROR(WritePair(dir, cert_path, cert.get(), key_path, key.get(), options.overwrite));
  return cert_path;
}

absl::StatusOr<PeerIdentity> IdentityFromPem(absl::string_view pem) {
  ErrorQueueScope errors;
  X509Ptr cert = ParseCertificate(pem);
  if (cert == nullptr) return absl::UnauthenticatedError(absl::StrCat("not a PEM certificate", SslErrors()));
  return IdentityOf(cert.get());
}

absl::StatusOr<PeerIdentity> CheckCredentialFiles(const std::string& ca_file, const std::string& cert_file,
                                                  const std::string& key_file) {
  ErrorQueueScope errors;
  ASSIGN_OR_RETURN(std::string ca_pem, ReadPemFile(ca_file, "CA certificate"));
  ASSIGN_OR_RETURN(std::string cert_pem, ReadPemFile(cert_file, "certificate"));
  ASSIGN_OR_RETURN(std::string key_pem, ReadPemFile(key_file, "private key"));
  X509Ptr ca = ParseCertificate(ca_pem);
  if (ca == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("CA certificate ", ca_file, " is not a PEM certificate", SslErrors()));
  }
  X509Ptr cert = ParseCertificate(cert_pem);
  if (cert == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("certificate ", cert_file, " is not a PEM certificate", SslErrors()));
  }
  PkeyPtr key = ParsePrivateKey(key_pem);
  Wipe(&key_pem);
  if (key == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("private key ", key_file, " is not an unencrypted PEM private key", SslErrors()));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::FailedPreconditionError(absl::StrCat("private key ", key_file, " does not match certificate ",
                                                      cert_file, " (is it the key of another identity?)"));
  }
  StorePtr store(X509_STORE_new());
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (store == nullptr || ctx == nullptr || X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1 ||
      X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_ANY) != 1) {
    return absl::InternalError(absl::StrCat("cannot set up verification of ", cert_file, SslErrors()));
  }
  if (X509_verify_cert(ctx.get()) != 1) return VerifyError(ctx.get(), ca_file, cert_file);
  absl::StatusOr<PeerIdentity> id = IdentityOf(cert.get());
  if (!id.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("certificate ", cert_file, " is not a weft identity: ", id.status().message()));
  }
  return id;
}

absl::StatusOr<CertificateInfo> DescribeCertificate(absl::string_view pem) {
  ErrorQueueScope errors;
  X509Ptr cert = ParseCertificate(pem);
  if (cert == nullptr) return absl::InvalidArgumentError(absl::StrCat("not a PEM certificate", SslErrors()));
  CertificateInfo info;
  info.subject = NameText(X509_get_subject_name(cert.get()));
  info.issuer = NameText(X509_get_issuer_name(cert.get()));
  BignumPtr serial(ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert.get()), nullptr));
  if (serial != nullptr) {
    std::unique_ptr<char, OpensslFree> hex(BN_bn2hex(serial.get()));
    if (hex != nullptr) info.serial = hex.get();
  }
  info.is_ca = (X509_get_extension_flags(cert.get()) & EXFLAG_CA) != 0;
  info.not_before = TimeOf(X509_get0_notBefore(cert.get()));
  info.not_after = TimeOf(X509_get0_notAfter(cert.get()));
  GeneralNamesPtr names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr)));
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type == GEN_DNS) {
      const ASN1_STRING* s = name->d.dNSName;
      info.dns_names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)), ASN1_STRING_length(s));
    } else if (name->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* ip = name->d.iPAddress;
      const int len = ASN1_STRING_length(ip);
      char text[INET6_ADDRSTRLEN] = "";
      if ((len == 4 || len == 16) &&
          inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(ip), text, sizeof(text)) != nullptr) {
        info.ip_addresses.push_back(text);
      }
    }
  }
  return info;
}

}  // namespace weft
