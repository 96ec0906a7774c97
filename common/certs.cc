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

namespace weft {
namespace {

constexpr char kOrgCluster[] = "weft:cluster";
constexpr char kOrgUser[] = "weft:user";
constexpr char kOrgAdmin[] = "weft:admin";
constexpr int kMaxDays = 36500;
constexpr size_t kMaxNameLength = 64;  // ub-common-name: the longest CN
constexpr off_t kMaxPemFileBytes = 1 << 20;
// notBefore lies this far in the past, so that a peer whose clock is a little
// behind accepts a certificate issued just now.
constexpr long kBackdateSeconds = 300;

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
template <typename T, void (*Free)(T*)>
using Owned = std::unique_ptr<T, Deleter<T, Free>>;

using X509Ptr = Owned<X509, X509_free>;
using PkeyPtr = Owned<EVP_PKEY, EVP_PKEY_free>;
using BioPtr = Owned<BIO, BIO_free_all>;
using StorePtr = Owned<X509_STORE, X509_STORE_free>;
using StoreCtxPtr = Owned<X509_STORE_CTX, X509_STORE_CTX_free>;
using ExtensionPtr = Owned<X509_EXTENSION, X509_EXTENSION_free>;
using BignumPtr = Owned<BIGNUM, BN_free>;
using GeneralNamesPtr = Owned<GENERAL_NAMES, GENERAL_NAMES_free>;
using GeneralNamePtr = Owned<GENERAL_NAME, GENERAL_NAME_free>;
using Ia5StringPtr = Owned<ASN1_IA5STRING, ASN1_IA5STRING_free>;
struct OpensslFree {
  void operator()(void* p) const { OPENSSL_free(p); }
};

struct FdCloser {
  ~FdCloser() { close(fd); }
  int fd;
};

// Clears this thread's OpenSSL error queue on entry and on exit, so that no
// stale error is reported by, or leaks out of, a public function.
class ErrorQueueScope {
 public:
  ErrorQueueScope() { ERR_clear_error(); }
  ~ErrorQueueScope() { ERR_clear_error(); }
};

// Drains the error queue: " (error:...; error:...)", or "" when empty.
std::string SslErrors() {
  std::vector<std::string> errors;
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    errors.push_back(buf);
  }
  return errors.empty() ? "" : absl::StrCat(" (", absl::StrJoin(errors, "; "), ")");
}

std::string Quote(absl::string_view s) { return absl::StrCat("\"", absl::CHexEscape(s), "\""); }

std::string JoinPath(absl::string_view dir, absl::string_view file) {
  while (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
  return absl::StrCat(dir, dir == "/" ? "" : "/", file);
}

// ---- Names and hosts -------------------------------------------------------

bool IsJobName(absl::string_view s) {
  if (s.empty() || !absl::ascii_islower(s[0])) return false;
  for (char c : s) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '_' && c != '-') return false;
  }
  return true;
}

// "/job:NAME/task:N" -> "NAME-N"; false for any other string.
bool TaskFileBase(absl::string_view name, std::string* base) {
  if (name.size() > kMaxNameLength || !absl::ConsumePrefix(&name, "/job:")) return false;
  const size_t slash = name.find("/task:");
  if (slash == absl::string_view::npos) return false;
  const absl::string_view job = name.substr(0, slash);
  const absl::string_view index = name.substr(slash + 6);
  if (!IsJobName(job) || index.empty() || index.size() > 9 || (index.size() > 1 && index[0] == '0')) return false;
  for (char c : index) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  *base = absl::StrCat(job, "-", index);
  return true;
}

bool IsUserName(absl::string_view s) {
  if (s.empty() || s.size() > kMaxNameLength || !absl::ascii_isalnum(s[0]) || s == "master" || s == "ca") return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '@' && c != '-') return false;
  }
  return true;
}

bool IsIpAddress(const std::string& host) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// RFC 1123 host names, optionally with a leading "*." wildcard label; the
// last label may not be all digits (so "1.2.3" is not taken for a name).
bool IsDnsName(absl::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  absl::ConsumePrefix(&host, "*.");
  std::vector<absl::string_view> labels = absl::StrSplit(host, '.');
  for (absl::string_view label : labels) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      if (!absl::ascii_isalnum(c) && c != '-') return false;
    }
  }
  for (char c : labels.back()) {
    if (!absl::ascii_isdigit(c)) return true;
  }
  return false;
}

absl::Status CheckHost(const std::string& host) {
  if (IsIpAddress(host) || IsDnsName(host)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("host ", Quote(host),
                   " is neither an IP address nor a DNS name (such as worker-1.example.com or *.example.com)"));
}

absl::Status CheckDays(int days) {
  if (days >= 1 && days <= kMaxDays) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("validity of ", days, " days is outside [1, ", kMaxDays, "]"));
}

const char* OrgOf(Role role) {
  switch (role) {
    case Role::kCluster:
      return kOrgCluster;
    case Role::kUser:
      return kOrgUser;
    case Role::kAdmin:
      return kOrgAdmin;
  }
  return kOrgUser;
}

// ---- Files -------------------------------------------------------------------

absl::Status ErrnoError(absl::string_view what, const std::string& path, int err) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " ", path));
}

// mkdir -p with mode 0700 for every directory it creates.
absl::Status MakeDirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string prefix = dir.substr(0, i);
    if (mkdir(prefix.c_str(), 0700) == 0) {
      if (chmod(prefix.c_str(), 0700) != 0) return ErrnoError("cannot chmod directory", prefix, errno);
    } else if (errno != EEXIST) {
      return ErrnoError("cannot create directory", prefix, errno);
    }
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return ErrnoError("cannot stat directory", dir, errno);
  if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(dir, " is not a directory"));
  return absl::OkStatus();
}

absl::Status RefuseExisting(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (access(path.c_str(), F_OK) == 0) {
      return absl::AlreadyExistsError(absl::StrCat(path, " already exists; refusing to overwrite it"));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteAndSync(int fd, absl::string_view data, mode_t mode, const std::string& path) {
  if (fchmod(fd, mode) != 0) return ErrnoError("cannot chmod", path, errno);
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("cannot write", path, errno);
    data.remove_prefix(static_cast<size_t>(n));
  }
  if (fsync(fd) != 0) return ErrnoError("cannot fsync", path, errno);
  return absl::OkStatus();
}

// Moves `tmp` to `path`; without `overwrite`, atomically refuses an existing
// `path` (renameat2 RENAME_NOREPLACE, or a check first where the file
// system lacks it).
absl::Status CommitRename(const std::string& tmp, const std::string& path, bool overwrite) {
  if (!overwrite) {
    if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) return absl::OkStatus();
    if (errno != EINVAL && errno != ENOSYS) {
      if (errno == EEXIST) return RefuseExisting({path});
      return ErrnoError("cannot rename to", path, errno);
    }
    RETURN_IF_ERROR(RefuseExisting({path}));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("cannot rename to", path, errno);
  return absl::OkStatus();
}

// Writes `data` to a new file in `path`'s directory (open O_CREAT|O_EXCL,
// `mode`), fsyncs it, renames it to `path` and fsyncs the directory.
absl::Status WriteFileAtomically(const std::string& dir, const std::string& path, absl::string_view data, mode_t mode,
                                 bool overwrite) {
  unsigned char r[6];
  if (RAND_bytes(r, sizeof(r)) != 1) return absl::InternalError(absl::StrCat("RAND_bytes failed", SslErrors()));
  const std::string tmp =
      absl::StrCat(path, ".tmp-", absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(r), sizeof(r))));
  const int fd = open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoError("cannot create", tmp, errno);
  absl::Status s = WriteAndSync(fd, data, mode, tmp);
  if (close(fd) != 0 && s.ok()) s = ErrnoError("cannot close", tmp, errno);
  if (s.ok()) s = CommitRename(tmp, path, overwrite);
  if (!s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return ErrnoError("cannot open directory", dir, errno);
  const int rc = fsync(dfd);
  const int err = errno;
  close(dfd);
  if (rc != 0) return ErrnoError("cannot fsync directory", dir, err);
  return absl::OkStatus();
}

// ---- OpenSSL objects ---------------------------------------------------------

X509Ptr ParseCertificate(absl::string_view pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return nullptr;
  return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

// An encrypted key fails rather than prompting on the terminal.
int NoPassword(char*, int, int, void*) { return -1; }

PkeyPtr ParsePrivateKey(absl::string_view pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return nullptr;
  return PkeyPtr(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassword, nullptr));
}

std::string BioContents(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

absl::StatusOr<std::string> CertificatePem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || PEM_write_bio_X509(bio.get(), cert) != 1) {
    return absl::InternalError(absl::StrCat("cannot PEM-encode a certificate", SslErrors()));
  }
  return BioContents(bio.get());
}

// PKCS#8, unencrypted. The BIO is secure memory, wiped when freed.
absl::StatusOr<std::string> PrivateKeyPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_secmem()));
  if (bio == nullptr || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return absl::InternalError(absl::StrCat("cannot PEM-encode a private key", SslErrors()));
  }
  return BioContents(bio.get());
}

void Wipe(std::string* secret) {
  if (!secret->empty()) OPENSSL_cleanse(&(*secret)[0], secret->size());
}

// Version 3, a random serial, subject O (when not empty) and CN, validity,
// public key. The caller sets the issuer and extensions and signs it.
absl::StatusOr<X509Ptr> NewCertificate(EVP_PKEY* key, const std::string& cn, const char* org, int days) {
  X509Ptr cert(X509_new());
  unsigned char serial[16];
  bool zero = true;
  while (zero) {
    if (RAND_bytes(serial, sizeof(serial)) != 1) return absl::InternalError(absl::StrCat("RAND_bytes", SslErrors()));
    for (unsigned char b : serial) zero = zero && b == 0;
  }
  BignumPtr bn(BN_bin2bn(serial, sizeof(serial), nullptr));
  X509_NAME* subject = cert == nullptr ? nullptr : X509_get_subject_name(cert.get());
  auto add = [subject](const char* field, const char* value) {
    return X509_NAME_add_entry_by_txt(subject, field, MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(value), -1,
                                      -1, 0) == 1;
  };
  if (cert == nullptr || bn == nullptr || X509_set_version(cert.get(), X509_VERSION_3) != 1 ||
      BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get())) == nullptr ||
      (org != nullptr && !add("O", org)) || !add("CN", cn.c_str()) ||
      X509_gmtime_adj(X509_getm_notBefore(cert.get()), -kBackdateSeconds) == nullptr ||
      X509_time_adj_ex(X509_getm_notAfter(cert.get()), days, 0, nullptr) == nullptr ||
      X509_set_pubkey(cert.get(), key) != 1) {
    return absl::InternalError(absl::StrCat("cannot build the certificate for ", Quote(cn), SslErrors()));
  }
  return cert;
}

absl::Status AddExtension(X509* cert, X509V3_CTX* ctx, int nid, const char* value) {
  ExtensionPtr ext(X509V3_EXT_conf_nid(nullptr, ctx, nid, value));
  if (ext == nullptr || X509_add_ext(cert, ext.get(), -1) != 1) {
    return absl::InternalError(absl::StrCat("cannot add extension ", OBJ_nid2sn(nid), "=", value, SslErrors()));
  }
  return absl::OkStatus();
}

// subjectAltName from checked hosts: IP entries for addresses, DNS otherwise.
absl::Status AddSubjectAltNames(X509* cert, const std::vector<std::string>& hosts) {
  GeneralNamesPtr names(sk_GENERAL_NAME_new_null());
  if (names == nullptr) return absl::InternalError(absl::StrCat("cannot allocate subjectAltName", SslErrors()));
  for (const std::string& host : hosts) {
    GeneralNamePtr name(GENERAL_NAME_new());
    if (name == nullptr) return absl::InternalError(absl::StrCat("cannot allocate a name", SslErrors()));
    if (IsIpAddress(host)) {
      ASN1_OCTET_STRING* ip = a2i_IPADDRESS(host.c_str());
      if (ip == nullptr) return absl::InternalError(absl::StrCat("cannot encode IP ", host, SslErrors()));
      GENERAL_NAME_set0_value(name.get(), GEN_IPADD, ip);
    } else {
      Ia5StringPtr dns(ASN1_IA5STRING_new());
      if (dns == nullptr || ASN1_STRING_set(dns.get(), host.data(), static_cast<int>(host.size())) != 1) {
        return absl::InternalError(absl::StrCat("cannot encode DNS name ", host, SslErrors()));
      }
      GENERAL_NAME_set0_value(name.get(), GEN_DNS, dns.release());
    }
    if (sk_GENERAL_NAME_push(names.get(), name.get()) == 0) {
      return absl::InternalError(absl::StrCat("cannot add ", host, " to subjectAltName", SslErrors()));
    }
    name.release();  // owned by `names` now
  }
  if (X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT) != 1) {
    return absl::InternalError(absl::StrCat("cannot add subjectAltName", SslErrors()));
  }
  return absl::OkStatus();
}

absl::Status Sign(X509* cert, EVP_PKEY* key) {
  if (X509_sign(cert, key, EVP_sha256()) <= 0) {
    return absl::InternalError(absl::StrCat("cannot sign the certificate", SslErrors()));
  }
  return absl::OkStatus();
}

absl::StatusOr<PkeyPtr> NewKey() {
  PkeyPtr key(EVP_EC_gen("prime256v1"));
  if (key == nullptr) return absl::InternalError(absl::StrCat("cannot generate an EC P-256 key", SslErrors()));
  return key;
}

// Writes the key (0600) then the certificate (0644); without `overwrite`, a
// key written for a certificate that could not be is removed again.
absl::Status WritePair(const std::string& dir, const std::string& cert_path, X509* cert, const std::string& key_path,
                       EVP_PKEY* key, bool overwrite) {
  ASSIGN_OR_RETURN(std::string cert_pem, CertificatePem(cert));
  ASSIGN_OR_RETURN(std::string key_pem, PrivateKeyPem(key));
  absl::Status s = WriteFileAtomically(dir, key_path, key_pem, 0600, overwrite);
  Wipe(&key_pem);
  RETURN_IF_ERROR(s);
  s = WriteFileAtomically(dir, cert_path, cert_pem, 0644, overwrite);
  if (!s.ok() && !overwrite) unlink(key_path.c_str());
  return s;
}

struct CaPair {
  X509Ptr cert;
  PkeyPtr key;
};

absl::StatusOr<CaPair> LoadCa(const std::string& dir) {
  const std::string cert_path = JoinPath(dir, "ca.crt");
  const std::string key_path = JoinPath(dir, "ca.key");
  absl::StatusOr<std::string> cert_pem = ReadPemFile(cert_path, "CA certificate");
  if (absl::IsNotFound(cert_pem.status())) {
    return absl::NotFoundError(absl::StrCat("no CA in ", dir, " (create one with `weft certs init ", dir,
                                            "`): ", cert_pem.status().message()));
  }
  if (!cert_pem.ok()) return cert_pem.status();
  ASSIGN_OR_RETURN(std::string key_pem, ReadPemFile(key_path, "CA private key"));
  CaPair ca{ParseCertificate(*cert_pem), ParsePrivateKey(key_pem)};
  Wipe(&key_pem);
  if (ca.cert == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("CA certificate ", cert_path, " is not a PEM certificate", SslErrors()));
  }
  if (ca.key == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("CA private key ", key_path, " is not an unencrypted PEM private key", SslErrors()));
  }
  if (X509_check_ca(ca.cert.get()) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(cert_path, " is not a CA certificate (no CA:TRUE)"));
  }
  if (X509_check_private_key(ca.cert.get(), ca.key.get()) != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("CA private key ", key_path, " does not match CA certificate ", cert_path, SslErrors()));
  }
  return ca;
}

// One subject entry as UTF-8: UNAUTHENTICATED when it is missing, repeated
// or not text.
absl::StatusOr<std::string> OneEntry(X509_NAME* name, int nid, absl::string_view label) {
  const int index = X509_NAME_get_index_by_NID(name, nid, -1);
  if (index < 0) return absl::UnauthenticatedError(absl::StrCat("the certificate's subject has no ", label));
  if (X509_NAME_get_index_by_NID(name, nid, index) >= 0) {
    return absl::UnauthenticatedError(absl::StrCat("the certificate's subject has more than one ", label));
  }
  unsigned char* utf8 = nullptr;
  const int n = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, index)));
  std::unique_ptr<unsigned char, OpensslFree> owned(utf8);
  if (n < 0) return absl::UnauthenticatedError(absl::StrCat("the certificate's subject ", label, " is not text"));
  std::string text(reinterpret_cast<char*>(utf8), static_cast<size_t>(n));
  if (text.find('\0') != std::string::npos) {
    return absl::UnauthenticatedError(absl::StrCat("the certificate's subject ", label, " contains a NUL byte"));
  }
  return text;
}

absl::StatusOr<PeerIdentity> IdentityOf(X509* cert) {
  X509_NAME* subject = X509_get_subject_name(cert);
  ASSIGN_OR_RETURN(std::string cn, OneEntry(subject, NID_commonName, "CN"));
  absl::StatusOr<std::string> org = OneEntry(subject, NID_organizationName, "O");
  if (!org.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat(org.status().message(), " (a weft certificate has O=weft:cluster, weft:user or weft:admin)"));
  }
  PeerIdentity id;
  id.name = cn;
  if (*org == kOrgCluster) {
    id.role = Role::kCluster;
    if (!IsClusterName(cn)) {
      return absl::UnauthenticatedError(
          absl::StrCat("the CN of a cluster certificate must be master or "
                       "/job:NAME/task:N, not ",
                       Quote(cn)));
    }
    return id;
  }
  if (*org == kOrgUser) {
    id.role = Role::kUser;
  } else if (*org == kOrgAdmin) {
    id.role = Role::kAdmin;
  } else {
    return absl::UnauthenticatedError(
        absl::StrCat("the certificate's subject O ", Quote(*org), " is not weft:cluster, weft:user or weft:admin"));
  }
  if (!IsUserName(cn)) {
    return absl::UnauthenticatedError(
        absl::StrCat("the CN of a ", RoleName(id.role), " certificate, ", Quote(cn), ", is not a valid user name"));
  }
  return id;
}

absl::Time TimeOf(const ASN1_TIME* t) {
  struct tm tm;
  std::memset(&tm, 0, sizeof(tm));
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) return absl::InfinitePast();
  return absl::FromTimeT(timegm(&tm));
}

std::string TimeText(const ASN1_TIME* t) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", TimeOf(t), absl::UTCTimeZone());
}

std::string NameText(const X509_NAME* name) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_RFC2253) < 0) return "";
  return BioContents(bio.get());
}

// Why X509_verify_cert refused `cert_file`, in words.
absl::Status VerifyError(X509_STORE_CTX* ctx, const std::string& ca_file, const std::string& cert_file) {
  const int err = X509_STORE_CTX_get_error(ctx);
  const bool leaf = X509_STORE_CTX_get_error_depth(ctx) == 0;
  const std::string which = leaf ? absl::StrCat("certificate ", cert_file) : absl::StrCat("CA certificate ", ca_file);
  X509* at = X509_STORE_CTX_get_current_cert(ctx);
  switch (err) {
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_CERT_SIGNATURE_FAILURE:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
      return absl::FailedPreconditionError(absl::StrCat("certificate ", cert_file, " was not signed by the CA in ",
                                                        ca_file, " (", X509_verify_cert_error_string(err), ")"));
    case X509_V_ERR_CERT_HAS_EXPIRED:
      return absl::FailedPreconditionError(absl::StrCat(
          which, " expired at ", at == nullptr ? "?" : TimeText(X509_get0_notAfter(at)), "; issue a new one"));
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return absl::FailedPreconditionError(absl::StrCat(which, " is not valid before ",
                                                        at == nullptr ? "?" : TimeText(X509_get0_notBefore(at)),
                                                        " (is this machine's clock right?)"));
    default:
      return absl::FailedPreconditionError(absl::StrCat("certificate ", cert_file,
                                                        " does not verify against the CA in ", ca_file, ": ",
                                                        X509_verify_cert_error_string(err)));
  }
}

}  // namespace

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
