// Transport security for weft's gRPC servers and channels, and the
// authentication of a call's caller.
//
// TransportSecurity is one process's side of mutual TLS: its certificate
// and key, and the cluster CA that every peer's certificate must chain to.
// Daemons serve TLS and present their certificate on every channel they
// open (master -> tasks, RecvTensor between tasks, collective streams);
// clients present a user certificate, or none when they authenticate with a
// bearer token. The files are watched (gRPC's FileWatcherCertificateProvider)
// and re-read when they change, so a rotated certificate needs no restart.
// Insecure() is plaintext with no identities: what `--insecure` selects and
// what in-process unit tests use.
//
// PeerAuthenticator turns a server call into a Caller (common/caller.h):
// the certificate's subject (CN = name, O = weft:cluster|weft:user|
// weft:admin; common/certs.h), or else an `authorization: Bearer TOKEN`
// header looked up in the master's TokenTable. UNAUTHENTICATED says which
// credential was missing or wrong.
//
// Thread-safety: both classes are thread-safe and immutable once built.
#ifndef WEFT_COMMON_GRPC_SECURITY_H_
#define WEFT_COMMON_GRPC_SECURITY_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/caller.h"
#include "common/token_table.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/tls_certificate_provider.h"

namespace weft {

struct TlsFiles {
  std::string ca;    // PEM: the cluster CA certificate
  std::string cert;  // PEM: this process's certificate
  std::string key;   // PEM: its private key
  // How often the files are checked for a new version.
  int refresh_seconds = 60;
};

class TransportSecurity {
 public:
  // Plaintext, no identities.
  static std::shared_ptr<const TransportSecurity> Insecure();
  // A daemon: all three files, checked now (common/certs.h
  // CheckCredentialFiles) so that a wrong file fails the start with its
  // name, and its identity must be a cluster member's (`want_identity`,
  // when not empty, must be its name exactly: "master", "/job:ps/task:0").
  static absl::StatusOr<std::shared_ptr<const TransportSecurity>> ForDaemon(const TlsFiles& files,
                                                                           const std::string& want_identity);
  // A client: the CA, and a user certificate and key unless both are empty
  // (a token client then proves who it is per call).
  static absl::StatusOr<std::shared_ptr<const TransportSecurity>> ForClient(const TlsFiles& files);

  bool insecure() const { return provider_ == nullptr; }
  // The certificate's name ("" insecure or certificate-less client).
  const std::string& identity() const { return identity_; }
  // A daemon's files (ForDaemon), for connections it makes outside gRPC
  // (common/tls_socket.h); empty otherwise.
  const TlsFiles& files() const { return files_; }

  // `require_client_certificate`: the data plane's ports require and verify
  // one; the master's port verifies one when offered and also admits
  // token clients.
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials(bool require_client_certificate) const;
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;

 private:
  TransportSecurity() = default;
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_;
  bool has_identity_ = false;
  std::string identity_;
  TlsFiles files_;
};

class PeerAuthenticator {
 public:
  // `security` says whether calls are authenticated at all (insecure: every
  // caller is Caller::Insecure()); `tokens` (may be null) admits token
  // clients.
  PeerAuthenticator(std::shared_ptr<const TransportSecurity> security, std::shared_ptr<TokenTable> tokens = nullptr);

  // Who called. UNAUTHENTICATED when the call carries neither a certificate
  // from the cluster CA nor a known token; logs every refusal with the
  // peer's address.
  absl::StatusOr<Caller> Authenticate(const grpc::ServerContextBase& ctx, absl::string_view what) const;

 private:
  // Looked up without a copy: a known certificate costs no allocation.
  absl::StatusOr<Caller> FromCertificate(absl::string_view pem) const;

  const std::shared_ptr<const TransportSecurity> security_;
  const std::shared_ptr<TokenTable> tokens_;
  // Parsed certificates by PEM, bounded (cleared when full).
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<std::string, absl::StatusOr<Caller>> cache_ ABSL_GUARDED_BY(mu_);
};

// Authenticates the caller of `ctx` and runs `check` (a Require* of
// common/caller.h, say) on it; logs every refusal with the caller and its
// address.
absl::StatusOr<Caller> Authorize(const PeerAuthenticator& auth, const grpc::ServerContextBase& ctx,
                                 absl::string_view what, const std::function<absl::Status(const Caller&)>& check);

// Logs once per process that `role` serves without TLS or authentication.
void WarnInsecureOnce(absl::string_view role);

}  // namespace weft

#endif  // WEFT_COMMON_GRPC_SECURITY_H_
