// Internal helpers of common/certs.cc, split by concern into
// certs_names.cc (names, hosts, roles), certs_files.cc (writing key and
// certificate files safely) and certs_openssl.cc (OpenSSL objects, identity,
// verification). Not for use outside those files and certs.cc.
#ifndef WEFT_COMMON_CERTS_INTERNAL_H_
#define WEFT_COMMON_CERTS_INTERNAL_H_

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/types.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/certs.h"

namespace weft {
namespace certs_internal {

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
std::string SslErrors();
// `s` quoted with C escapes, for messages that name untrusted text.
std::string Quote(absl::string_view s);
std::string JoinPath(absl::string_view dir, absl::string_view file);

// ---- Names and hosts (certs_names.cc) ----
bool IsJobName(absl::string_view s);
// For "job:index" (or "job"), the file base "job-index"; false otherwise.
bool TaskFileBase(absl::string_view name, std::string* base);
bool IsUserName(absl::string_view s);
bool IsIpAddress(const std::string& host);
bool IsDnsName(absl::string_view host);
absl::Status CheckHost(const std::string& host);
absl::Status CheckDays(int days);
const char* OrgOf(Role role);

// ---- Files (certs_files.cc) ----
absl::Status ErrnoError(absl::string_view what, const std::string& path, int err);
// mkdir -p with mode 0700 for every directory it creates.
absl::Status MakeDirs(const std::string& dir);
absl::Status RefuseExisting(const std::vector<std::string>& paths);
// Writes `data` to a new file in `path`'s directory (mode `mode`), fsyncs it,
// renames it to `path` (refusing an existing one unless `overwrite`) and
// fsyncs the directory.
absl::Status WriteFileAtomically(const std::string& dir, const std::string& path, absl::string_view data, mode_t mode,
                                 bool overwrite);

// ---- OpenSSL objects (certs_openssl.cc) ----
X509Ptr ParseCertificate(absl::string_view pem);
PkeyPtr ParsePrivateKey(absl::string_view pem);
absl::StatusOr<std::string> CertificatePem(X509* cert);
absl::StatusOr<std::string> PrivateKeyPem(EVP_PKEY* key);
// Overwrites a secret before its memory is released.
void Wipe(std::string* secret);
absl::StatusOr<X509Ptr> NewCertificate(EVP_PKEY* key, const std::string& cn, const char* org, int days);
absl::Status AddExtension(X509* cert, X509V3_CTX* ctx, int nid, const char* value);
absl::Status AddSubjectAltNames(X509* cert, const std::vector<std::string>& hosts);
absl::Status Sign(X509* cert, EVP_PKEY* key);
absl::StatusOr<PkeyPtr> NewKey();
absl::Status WritePair(const std::string& dir, const std::string& cert_path, X509* cert, const std::string& key_path,
                       EVP_PKEY* key, bool overwrite);
struct CaPair {
  X509Ptr cert;
  PkeyPtr key;
};
absl::StatusOr<CaPair> LoadCa(const std::string& dir);
absl::StatusOr<PeerIdentity> IdentityOf(X509* cert);
absl::Time TimeOf(const ASN1_TIME* t);
std::string TimeText(const ASN1_TIME* t);
std::string NameText(const X509_NAME* name);
absl::Status VerifyError(X509_STORE_CTX* ctx, const std::string& ca_file, const std::string& cert_file);

}  // namespace certs_internal
}  // namespace weft

#endif  // WEFT_COMMON_CERTS_INTERNAL_H_
