// TlsSocket over OpenSSL 3 and POSIX sockets.
//
// SIGPIPE: the SSL object reaches the socket through a BIO of our own whose write is send(MSG_NOSIGNAL), as
// plaintext writes are, so a write to a reset connection returns EPIPE; no signal disposition or mask is touched.
// Deadlines: connect, handshake and confirmations poll a non-blocking socket; ReadFull and WriteAll block
// (Shutdown, keepalive and TCP_USER_TIMEOUT end them).
#include "common/tls_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/certs.h"
#include "common/certs_internal.h"
#include "common/grpc_security.h"
#include "common/status_macros.h"
#include "common/tls_socket_internal.h"

namespace weft {

using certs_internal::ErrorQueueScope;
using certs_internal::Owned;
using certs_internal::SslErrors;
using tls_internal::JoinHostPort;
using tls_internal::PortOf;
using SslCtxPtr = Owned<SSL_CTX, SSL_CTX_free>;
using SslPtr = Owned<SSL, SSL_free>;
using AddrInfoPtr = Owned<addrinfo, freeaddrinfo>;

struct TlsSocketContext::Impl {
  TlsFiles files;
  PeerIdentity identity;  // as of FromFiles; for messages only
  absl::StatusOr<SslCtxPtr> NewCtx() const;
};

struct TlsSocket::Impl {
  int fd = -1;
  SslPtr ssl;  // null: plaintext
  std::atomic<bool> shut_down{false};
  std::string what;  // "TLS socket to 10.0.0.2:4567 (/job:worker/task:1)": starts messages
};

namespace {

constexpr char kAccepted = 'A';  // the confirmation byte

int RemainingMs(absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(deadline - absl::Now(), absl::Milliseconds(1)));
  return static_cast<int>(std::clamp<int64_t>(ms, 0, INT_MAX));
}

bool SetNonBlocking(int fd, bool on) {
  const int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK)) == 0;
}

// Keepalive and TCP_USER_TIMEOUT notice a vanished peer host (no FIN, no RST) in ~30 s, not the kernel's 15 minutes.
void SetOptions(int fd) {
  const int options[][3] = {{IPPROTO_TCP, TCP_NODELAY, 1},   {SOL_SOCKET, SO_KEEPALIVE, 1},
                            {IPPROTO_TCP, TCP_KEEPIDLE, 10}, {IPPROTO_TCP, TCP_KEEPINTVL, 5},
                            {IPPROTO_TCP, TCP_KEEPCNT, 3},   {IPPROTO_TCP, TCP_USER_TIMEOUT, 30000}};  // ms
  for (const auto& o : options) setsockopt(fd, o[0], o[1], &o[2], sizeof(o[2]));
}

std::string PeerAddress(int fd) {
  sockaddr_storage ss{};
  auto* addr = reinterpret_cast<sockaddr*>(&ss);
  socklen_t len = sizeof(ss);
  char host[NI_MAXHOST];
  const bool ok = getpeername(fd, addr, &len) == 0 &&
                  getnameinfo(addr, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) == 0;
  return ok ? JoinHostPort(host, PortOf(ss)) : "an unknown address";
}

// The BIO under the SSL object: recv or send, retrying EINTR, reporting EAGAIN as "retry", never raising SIGPIPE.
int BioTransfer(BIO* bio, char* data, int n, bool write) {
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(bio)));
  BIO_clear_retry_flags(bio);
  ssize_t r;
  do r = write ? send(fd, data, n, MSG_NOSIGNAL) : recv(fd, data, n, 0);
  while (r < 0 && errno == EINTR);
  if (r < 0 && errno == EAGAIN) BIO_set_flags(bio, BIO_FLAGS_SHOULD_RETRY | (write ? BIO_FLAGS_WRITE : BIO_FLAGS_READ));
  return static_cast<int>(r);
}

const BIO_METHOD* SocketBioMethod() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "weft socket");
    if (m == nullptr) return m;
    BIO_meth_set_write(m, [](BIO* b, const char* d, int n) { return BioTransfer(b, const_cast<char*>(d), n, true); });
    BIO_meth_set_read(m, [](BIO* b, char* d, int n) { return BioTransfer(b, d, n, false); });
    // Nothing is buffered, so a flush is done at once; any other control (kTLS, pending bytes, EOF) is answered "no".
    BIO_meth_set_ctrl(m, [](BIO*, int cmd, long, void*) -> long { return cmd == BIO_CTRL_FLUSH ? 1 : 0; });
    return m;
  }();
  return method;
}

absl::StatusOr<SslPtr> NewSsl(const TlsSocketContext::Impl& context, int fd, bool server) {
  ASSIGN_OR_RETURN(SslCtxPtr ctx, context.NewCtx());
  SslPtr ssl(SSL_new(ctx.get()));  // holds its own reference to ctx
  BIO* bio = SocketBioMethod() == nullptr ? nullptr : BIO_new(SocketBioMethod());
  if (ssl == nullptr || bio == nullptr) {
    BIO_free(bio);
    return absl::InternalError(absl::StrCat("cannot create a TLS connection", SslErrors()));
  }
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
  BIO_set_init(bio, 1);
  SSL_set_bio(ssl.get(), bio, bio);  // one reference for both directions
  server ? SSL_set_accept_state(ssl.get()) : SSL_set_connect_state(ssl.get());
  return ssl;
}

// How an SSL call (or plaintext recv/send) ended: ZERO_RETURN for a clean close, SYSCALL with errno for the rest.
struct SslResult {
  int error = SSL_ERROR_NONE, err_no = 0;
  bool timed_out = false;
};

// Repeats `op` (an SSL call on the non-blocking socket) until it succeeds, fails or `deadline` passes.
SslResult RunUntil(SSL* ssl, int fd, absl::Time deadline, absl::FunctionRef<int()> op) {
  for (;;) {
    errno = 0;
    const int ret = op();
    const int err_no = errno;
    if (ret > 0) return {};
    const int error = SSL_get_error(ssl, ret);
    if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) return {error, err_no, false};
    const int ms = RemainingMs(deadline);
    if (ms <= 0) return {error, 0, true};
    pollfd p{fd, static_cast<short>(error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
    if (poll(&p, 1, ms) < 0 && errno != EINTR) return {SSL_ERROR_SYSCALL, errno, false};
  }
}

std::string Why(SSL* ssl, const SslResult& r) {
  if (r.error == SSL_ERROR_ZERO_RETURN) return "the peer closed the connection";
  if (r.error == SSL_ERROR_SYSCALL) return r.err_no == 0 ? "the peer hung up" : std::strerror(r.err_no);
  const long verify = SSL_get_verify_result(ssl);
  return absl::StrCat("TLS error", SslErrors(), verify == X509_V_OK ? "" : ": ",
                      verify == X509_V_OK ? "" : X509_verify_cert_error_string(verify));
}

// A failed handshake step: UNAVAILABLE when the connection ended, else UNAUTHENTICATED (a certificate refused).
absl::Status StepStatus(SSL* ssl, const SslResult& r, absl::string_view step, absl::Duration timeout) {
  if (r.timed_out) {
    return absl::DeadlineExceededError(absl::StrCat(step, " did not finish within ", absl::FormatDuration(timeout)));
  }
  const bool hung_up = r.error == SSL_ERROR_SYSCALL || r.error == SSL_ERROR_ZERO_RETURN ||
                       ERR_GET_REASON(ERR_peek_last_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING;
  const std::string why = absl::StrCat(step, " failed: ", Why(ssl, r));
  return hung_up ? absl::UnavailableError(why) : absl::UnauthenticatedError(why);
}

// After the handshake each side tells the other that it accepts its certificate (one byte), or closes with a
// close_notify (`refused` says what that means to the side that reads it).
absl::Status Confirm(SSL* ssl, int fd, absl::Time deadline, absl::Duration timeout, bool send,
                     absl::string_view refused) {
  char byte = kAccepted;
  const SslResult r =
      RunUntil(ssl, fd, deadline, [&] { return send ? SSL_write(ssl, &byte, 1) : SSL_read(ssl, &byte, 1); });
  if (r.error == SSL_ERROR_ZERO_RETURN && !send) return absl::UnauthenticatedError(refused);
  if (r.error != SSL_ERROR_NONE) return StepStatus(ssl, r, "confirming the handshake", timeout);
  return byte == kAccepted ? absl::OkStatus() : absl::UnavailableError("the peer sent an unknown confirmation");
}

// The handshake and confirmations; the peer's name. The client admits `expect_peer` only, the server any member.
absl::StatusOr<std::string> Handshake(TlsSocket::Impl* s, const TlsSocketContext::Impl& context, bool server,
                                      const std::string& expect_peer, absl::Time deadline, absl::Duration timeout) {
  ASSIGN_OR_RETURN(s->ssl, NewSsl(context, s->fd, server));
  SSL* ssl = s->ssl.get();
  const std::string side = server ? "client" : "server", me = context.identity.name;
  const SslResult r = RunUntil(ssl, s->fd, deadline, [ssl] { return SSL_do_handshake(ssl); });
  if (r.error != SSL_ERROR_NONE) {
    return StepStatus(ssl, r, server ? "TLS handshake" : absl::StrCat("TLS handshake with ", expect_peer), timeout);
  }
  X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr) return absl::UnauthenticatedError(absl::StrCat("the ", side, " presented no certificate"));
  absl::StatusOr<PeerIdentity> id = certs_internal::IdentityOf(cert);
  if (!id.ok()) {
    return absl::UnauthenticatedError(absl::StrCat("the ", side, "'s certificate: ", id.status().message()));
  }
  // The server reads the client's verdict before giving its own: refusing the client then leaves no unread bytes to
  // turn its close_notify into a reset.
  if (server) {
    RETURN_IF_ERROR(Confirm(ssl, s->fd, deadline, timeout, /*send=*/false,
                            absl::StrCat("the client (", id->name, ") refused this server's certificate (", me, ")")));
  }
  if (id->role != Role::kCluster || (!server && id->name != expect_peer)) {
    SSL_shutdown(ssl);  // a close_notify: we refused the peer, we did not die
    return absl::UnauthenticatedError(absl::StrCat(
        "the ", side, "'s certificate names ", id->name,
        server ? absl::StrCat(", a ", RoleName(id->role), " certificate; only the master and tasks may connect")
               : absl::StrCat(id->role == Role::kCluster ? "" : " (not a cluster member)", ", not ", expect_peer)));
  }
  RETURN_IF_ERROR(Confirm(ssl, s->fd, deadline, timeout, /*send=*/true, ""));
  if (!server) {
    RETURN_IF_ERROR(Confirm(ssl, s->fd, deadline, timeout, /*send=*/false,
                            absl::StrCat("the server (", expect_peer, ") refused this process's certificate (", me,
                                         ", role ", RoleName(context.identity.role), ")")));
  }
  return id->name;
}

// One read or write on the blocking socket: the bytes moved, or 0 with `*r` saying why none were.
size_t Transfer(TlsSocket::Impl* s, bool write, char* data, size_t n, SslResult* r) {
  for (;;) {
    errno = 0;
    if (s->ssl != nullptr) {
      size_t done = 0;
      SSL* ssl = s->ssl.get();
      if ((write ? SSL_write_ex(ssl, data, n, &done) : SSL_read_ex(ssl, data, n, &done)) == 1) return done;
      *r = {SSL_get_error(ssl, 0), errno, false};
      if (r->error != SSL_ERROR_WANT_READ && r->error != SSL_ERROR_WANT_WRITE) return 0;
      continue;
    }
    const ssize_t done = write ? send(s->fd, data, n, MSG_NOSIGNAL) : recv(s->fd, data, n, 0);
    if (done > 0) return static_cast<size_t>(done);
    if (done < 0 && errno == EINTR) continue;
    *r = {done == 0 ? SSL_ERROR_ZERO_RETURN : SSL_ERROR_SYSCALL, errno, false};
    return 0;
  }
}

absl::Status Broken(TlsSocket::Impl* s, absl::string_view doing, const SslResult& r) {
  const std::string why = s->shut_down.load() ? "the socket was shut down" : Why(s->ssl.get(), r);
  return absl::UnavailableError(absl::StrCat(s->what, ": ", doing, ": ", why));
}

// A connected non-blocking descriptor: each of host's addresses in turn.
absl::StatusOr<int> ConnectFd(const std::string& host, int port, absl::Time deadline, absl::Duration timeout) {
  const addrinfo hints{AI_NUMERICSERV, AF_UNSPEC, SOCK_STREAM};
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  AddrInfoPtr list(found);
  absl::Status last = absl::UnavailableError(absl::StrCat(host, " has no address"));
  for (const addrinfo* a = found; a != nullptr && !absl::IsDeadlineExceeded(last); a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int err = fd < 0 || connect(fd, a->ai_addr, a->ai_addrlen) != 0 ? errno : 0;
    for (int ms; err == EINPROGRESS || err == EINTR;) {
      pollfd p{fd, POLLOUT, 0};
      if ((ms = RemainingMs(deadline)) <= 0) err = ETIMEDOUT;
      socklen_t size = sizeof(err);
      if (ms > 0 && poll(&p, 1, ms) > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &size) != 0) err = errno;
    }
    if (err == 0) return fd;
    if (fd >= 0) close(fd);
    last = err == ETIMEDOUT && RemainingMs(deadline) <= 0
               ? absl::DeadlineExceededError(absl::StrCat("no answer within ", absl::FormatDuration(timeout)))
               : absl::UnavailableError(std::strerror(err));
  }
  return last;
}

// Sets the socket's options and, with TLS, runs Handshake, non-blocking; the peer's name. On failure reads what the
// peer already sent, so that closing sends a FIN, not a reset that could destroy the alert we just sent.
absl::StatusOr<std::string> Establish(TlsSocket::Impl* s, const TlsSocketContext* context, bool server,
                                      const std::string& expect_peer, absl::Time deadline, absl::Duration timeout) {
  SetOptions(s->fd);
  absl::StatusOr<std::string> peer = std::string();
  if (context != nullptr) {
    peer = SetNonBlocking(s->fd, true) ? Handshake(s, context->impl(), server, expect_peer, deadline, timeout)
                                       : absl::InternalError(std::strerror(errno));
  }
  char buf[4096];
  while (!peer.ok() && recv(s->fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
  }
  if (peer.ok() && !SetNonBlocking(s->fd, false)) peer = absl::InternalError(std::strerror(errno));
  return peer.ok() ? peer : Annotate(peer.status(), s->what);
}

}  // namespace

absl::StatusOr<SslCtxPtr> TlsSocketContext::Impl::NewCtx() const {
  ErrorQueueScope errors;
  SslCtxPtr ctx(SSL_CTX_new(TLS_method()));
  SSL_CTX* c = ctx.get();
  if (c == nullptr || SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_max_proto_version(c, TLS1_3_VERSION) != 1) {
    return absl::InternalError(absl::StrCat("cannot create a TLS 1.3 context", SslErrors()));
  }
  SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  // No session tickets: the accepting side then sends nothing after its confirmation, so the connecting side, which
  // only writes, never has to read (header: Thread-safety); connections live as long as jobs anyway.
  SSL_CTX_set_num_tickets(c, 0);
  // Reads take whatever has arrived (up to 256 KiB), not one record's header and then its body: a 1 MiB chunk costs
  // a few recv calls instead of 130.
  SSL_CTX_set_read_ahead(c, 1);
  SSL_CTX_set_default_read_buffer_len(c, 256 << 10);
  // The cluster CA is the only trust anchor: no system certificates.
  if (SSL_CTX_load_verify_locations(c, files.ca.c_str(), nullptr) != 1 ||
      SSL_CTX_use_certificate_chain_file(c, files.cert.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(c, files.key.c_str(), SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(c) != 1) {
    return absl::FailedPreconditionError(absl::StrCat("cannot load the CA certificate ", files.ca, ", certificate ",
                                                      files.cert, " and key ", files.key, SslErrors()));
  }
  return ctx;
}

absl::StatusOr<std::shared_ptr<const TlsSocketContext>> TlsSocketContext::FromFiles(const TlsFiles& files) {
  ASSIGN_OR_RETURN(PeerIdentity identity, CheckCredentialFiles(files.ca, files.cert, files.key));
  std::shared_ptr<TlsSocketContext> context(new TlsSocketContext);
  context->impl_.reset(new Impl{files, identity});
  RETURN_IF_ERROR(context->impl_->NewCtx().status());  // what OpenSSL's loaders reject though the checks passed
  return context;
}

TlsSocketContext::~TlsSocketContext() = default;

absl::StatusOr<std::unique_ptr<TlsSocket>> TlsSocket::Connect(const TlsSocketContext* context, const std::string& host,
                                                              int port, const std::string& expect_peer,
                                                              absl::Duration timeout) {
  ErrorQueueScope errors;
  const absl::Time deadline = absl::Now() + timeout;
  std::unique_ptr<TlsSocket> socket(new TlsSocket);
  socket->remote_ = JoinHostPort(host, port);
  Impl* s = (socket->impl_ = std::make_unique<Impl>()).get();
  s->what = absl::StrCat(context != nullptr ? "TLS" : "plaintext", " socket to ", socket->remote_);
  absl::StatusOr<int> fd = ConnectFd(host, port, deadline, timeout);
  const std::string target = expect_peer.empty() ? host : expect_peer;
  if (!fd.ok()) return Annotate(fd.status(), absl::StrCat(s->what, ": cannot connect to ", target));
  s->fd = *fd;
  ASSIGN_OR_RETURN(socket->peer_, Establish(s, context, /*server=*/false, expect_peer, deadline, timeout));
  if (!expect_peer.empty()) absl::StrAppend(&s->what, " (", expect_peer, ")");
  return socket;
}

absl::StatusOr<std::unique_ptr<TlsSocket>> TlsSocket::Accept(const TlsSocketContext* context, int fd,
                                                             absl::Duration timeout) {
  ErrorQueueScope errors;
  std::unique_ptr<TlsSocket> socket(new TlsSocket);
  socket->remote_ = PeerAddress(fd);
  Impl* s = (socket->impl_ = std::make_unique<Impl>()).get();
  s->fd = fd;  // closed by ~TlsSocket, on failure too
  s->what = absl::StrCat(context != nullptr ? "TLS" : "plaintext", " socket from ", socket->remote_);
  ASSIGN_OR_RETURN(socket->peer_, Establish(s, context, /*server=*/true, "", absl::Now() + timeout, timeout));
  if (context != nullptr) absl::StrAppend(&s->what, " (", socket->peer_, ")");
  return socket;
}

TlsSocket::~TlsSocket() {
  if (impl_->ssl != nullptr && !impl_->shut_down.load()) {
    // A close_notify lets the reader tell the end of the stream from a crash (after a failed handshake nothing is
    // sent). Bounded: a peer that stopped reading may have filled the socket's buffer.
    ErrorQueueScope errors;
    const timeval limit{1, 0};
    setsockopt(impl_->fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
    SSL_shutdown(impl_->ssl.get());
  }
  impl_->ssl.reset();
  if (impl_->fd >= 0) close(impl_->fd);
}

absl::Status TlsSocket::WriteAll(absl::Span<const absl::string_view> pieces) {
  ErrorQueueScope errors;
  for (absl::string_view piece : pieces) {
    for (size_t done = 0; done < piece.size();) {
      SslResult r;
      const size_t n = Transfer(impl_.get(), /*write=*/true, const_cast<char*>(piece.data() + done),
                                piece.size() - done, &r);
      if (n == 0) return Broken(impl_.get(), "write", r);
      done += n;
    }
  }
  return absl::OkStatus();
}

absl::Status TlsSocket::ReadFull(char* out, size_t n) {
  ErrorQueueScope errors;
  for (size_t got = 0; got < n;) {
    SslResult r;
    const size_t k = Transfer(impl_.get(), /*write=*/false, out + got, n - got, &r);
    got += k;
    if (k > 0) continue;
    if (r.error == SSL_ERROR_ZERO_RETURN && got == 0 && !impl_->shut_down.load()) {
      return absl::OutOfRangeError(absl::StrCat(impl_->what, ": the peer closed the connection"));
    }
    return Broken(impl_.get(), absl::StrCat("read (", got, " of ", n, " bytes)"), r);
  }
  return absl::OkStatus();
}

void TlsSocket::Shutdown() {
  impl_->shut_down.store(true);
  shutdown(impl_->fd, SHUT_RDWR);
}

}  // namespace weft
