#include "common/grpc_security.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "common/certs.h"
#include "common/logging.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace weft {
namespace {

constexpr size_t kMaxCachedCertificates = 1024;

Caller CallerFrom(const PeerIdentity& id) {
  Caller c;
  c.kind = id.role == Role::kCluster ? Caller::Kind::kCluster : Caller::Kind::kUser;
  c.name = id.name;
  c.admin = id.role == Role::kAdmin;
  c.credential = "certificate";
  return c;
}

}  // namespace

void WarnInsecureOnce(absl::string_view role) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  Logger(std::string(role))
      ->warn("--insecure: serving plaintext gRPC with no authentication; anyone who reaches this port can run "
             "graphs, read variables and write checkpoints. Use certificates (weft certs) outside a throwaway "
             "cluster.");
}

std::shared_ptr<const TransportSecurity> TransportSecurity::Insecure() {
  static const auto* insecure = new std::shared_ptr<const TransportSecurity>(new TransportSecurity());
  return *insecure;
}

absl::StatusOr<std::shared_ptr<const TransportSecurity>> TransportSecurity::ForDaemon(
    const TlsFiles& files, const std::string& want_identity) {
  if (files.ca.empty() || files.cert.empty() || files.key.empty()) {
    return absl::FailedPreconditionError(
        "no certificates: pass --ca, --cert and --key (create them with `weft certs init DIR` and `weft certs issue "
        "DIR --name=...`), or --insecure to serve without TLS or authentication");
  }
  absl::StatusOr<PeerIdentity> id = CheckCredentialFiles(files.ca, files.cert, files.key);
  if (!id.ok()) return id.status();
  if (id->role != Role::kCluster) {
    return absl::FailedPreconditionError(absl::StrCat("certificate ", files.cert, " is a ", RoleName(id->role),
                                                      " certificate (", id->name,
                                                      "); a daemon needs one with O=weft:cluster"));
  }
  if (!want_identity.empty() && id->name != want_identity) {
    return absl::FailedPreconditionError(absl::StrCat("certificate ", files.cert, " is for ", id->name,
                                                      ", not for ", want_identity, " which this daemon runs"));
  }
  std::shared_ptr<TransportSecurity> s(new TransportSecurity());
  s->provider_ = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      files.key, files.cert, files.ca, static_cast<unsigned int>(std::max(files.refresh_seconds, 1)));
  s->has_identity_ = true;
  s->identity_ = id->name;
  s->files_ = files;
  return std::shared_ptr<const TransportSecurity>(std::move(s));
}

absl::StatusOr<std::shared_ptr<const TransportSecurity>> TransportSecurity::ForClient(const TlsFiles& files) {
  if (files.ca.empty()) {
    return absl::FailedPreconditionError("no CA certificate: pass --ca (or set WEFT_CA) to verify the master");
  }
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError("--cert and --key go together: pass both or neither");
  }
  std::shared_ptr<TransportSecurity> s(new TransportSecurity());
  const unsigned int refresh = static_cast<unsigned int>(std::max(files.refresh_seconds, 1));
  if (!files.cert.empty()) {
    absl::StatusOr<PeerIdentity> id = CheckCredentialFiles(files.ca, files.cert, files.key);
    if (!id.ok()) return id.status();
    s->provider_ =
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(files.key, files.cert, files.ca, refresh);
    s->has_identity_ = true;
    s->identity_ = id->name;
  } else {
    if (access(files.ca.c_str(), R_OK) != 0) {
      return absl::NotFoundError(absl::StrCat("CA certificate ", files.ca, " cannot be read: ", std::strerror(errno)));
    }
    s->provider_ = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(files.ca, refresh);
  }
  return std::shared_ptr<const TransportSecurity>(std::move(s));
}

std::shared_ptr<grpc::ServerCredentials> TransportSecurity::ServerCredentials(bool require_client_certificate) const {
  if (insecure()) return grpc::InsecureServerCredentials();
  grpc::experimental::TlsServerCredentialsOptions options(provider_);
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(require_client_certificate
                                    ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                    : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  return grpc::experimental::TlsServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> TransportSecurity::ChannelCredentials() const {
  if (insecure()) return grpc::InsecureChannelCredentials();
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(provider_);
  options.watch_root_certs();
  if (has_identity_) options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);
  // The server's certificate must name the host dialled (a SAN).
  options.set_certificate_verifier(std::make_shared<grpc::experimental::HostNameCertificateVerifier>());
  return grpc::experimental::TlsCredentials(options);
}

PeerAuthenticator::PeerAuthenticator(std::shared_ptr<const TransportSecurity> security,
                                     std::shared_ptr<TokenTable> tokens)
    : security_(std::move(security)), tokens_(std::move(tokens)) {}

absl::StatusOr<Caller> PeerAuthenticator::FromCertificate(absl::string_view pem) const {
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(pem);
    if (it != cache_.end()) return it->second;
  }
  absl::StatusOr<Caller> caller = absl::UnauthenticatedError("");
  absl::StatusOr<PeerIdentity> id = IdentityFromPem(pem);
  if (id.ok()) {
    caller = CallerFrom(*id);
  } else {
    caller = absl::UnauthenticatedError(absl::StrCat("the client certificate is not a weft identity: ",
                                                     id.status().message()));
  }
  absl::MutexLock lock(&mu_);
  if (cache_.size() >= kMaxCachedCertificates) cache_.clear();
  cache_.emplace(pem, caller);
  return caller;
}

absl::StatusOr<Caller> PeerAuthenticator::Authenticate(const grpc::ServerContextBase& ctx,
                                                       absl::string_view what) const {
  if (security_ == nullptr || security_->insecure()) return Caller::Insecure();
  absl::StatusOr<Caller> caller = absl::UnauthenticatedError("");
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  std::vector<grpc::string_ref> pems;
  if (auth != nullptr) pems = auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
  if (!pems.empty()) {
    // The TLS handshake verified it against the cluster CA.
    caller = FromCertificate(absl::string_view(pems[0].data(), pems[0].size()));
  } else {
    const auto& md = ctx.client_metadata();
    auto it = md.find("authorization");
    if (it == md.end()) {
      caller = absl::UnauthenticatedError(
          absl::StrCat(what, " needs credentials: a client certificate signed by the cluster CA",
                       tokens_ != nullptr ? " or an 'authorization: Bearer TOKEN' header" : "", "; the call had none"));
    } else if (tokens_ == nullptr) {
      caller = absl::UnauthenticatedError(
          absl::StrCat(what, " does not take bearer tokens here (no --auth_tokens_file); present a certificate"));
    } else {
      absl::string_view value(it->second.data(), it->second.size());
      if (!absl::ConsumePrefix(&value, "Bearer ")) {
        caller = absl::UnauthenticatedError("the authorization header is not 'Bearer TOKEN'");
      } else {
        absl::StatusOr<TokenUser> user = tokens_->Lookup(value);
        if (!user.ok()) {
          caller = user.status();
        } else {
          Caller c;
          c.kind = Caller::Kind::kUser;
          c.name = user->user;
          c.admin = user->admin;
          c.credential = "token";
          caller = c;
        }
      }
    }
  }
  if (!caller.ok()) {
    Logger("auth")->warn("refused {} from {}: {}", std::string(what), ctx.peer(), std::string(caller.status().message()));
  }
  return caller;
}

absl::StatusOr<Caller> Authorize(const PeerAuthenticator& auth, const grpc::ServerContextBase& ctx,
                                 absl::string_view what, const std::function<absl::Status(const Caller&)>& check) {
  absl::StatusOr<Caller> caller = auth.Authenticate(ctx, what);
  if (!caller.ok()) return caller;
  if (check) {
    absl::Status allowed = check(*caller);
    if (!allowed.ok()) {
      Logger("auth")->warn("refused {} from {} at {}: {}", std::string(what), caller->Describe(), ctx.peer(),
                           std::string(allowed.message()));
      return allowed;
    }
  }
  return caller;
}

}  // namespace weft
