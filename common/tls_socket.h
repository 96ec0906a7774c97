// TlsSocket: one blocking TCP connection between two daemons, with mutual
// TLS 1.3 on the cluster's certificates, or plaintext for an insecure
// cluster (--insecure, in-process tests). The collective transport between
// hosts (worker/collective/socket_collective_transport.h) owns one per peer;
// gRPC is not involved.
//
// Authentication is the same as the gRPC ports': both sides present a
// certificate that chains to the cluster CA (OpenSSL verifies it during the
// handshake); the subject names the peer (common/certs.h). The side that
// connects names the task it means to reach and refuses any other; the side
// that accepts admits cluster members only (master and tasks, never a user
// or admin certificate) and reports who connected. After the handshake each
// side sends the other one byte saying it accepts the other's certificate,
// so that Connect and Accept both fail, with UNAUTHENTICATED, when either
// side refuses (TLS 1.3 would otherwise let the client finish first and
// learn of a refusal only on its first read).
//
// TlsSocketContext reads the three files once per connection made or
// accepted (cheap next to a handshake), so a rotated certificate is used by
// the next connection without a restart, as the gRPC ports do.
//
// Thread-safety: one thread at a time may read or write a TlsSocket
// (OpenSSL does not allow SSL_read and SSL_write on one connection at once);
// weft uses each in one direction, the side that connects writing and the
// side that accepts reading. Shutdown may be called from any thread and
// wakes a blocked read or write. TlsListener: Close from any thread wakes a
// blocked AcceptFd.
#ifndef WEFT_COMMON_TLS_SOCKET_H_
#define WEFT_COMMON_TLS_SOCKET_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace weft {

struct TlsFiles;

// The certificates a daemon's sockets use. Null pointer: plaintext.
class TlsSocketContext {
 public:
  // CA, certificate and key files (PEM); checked now, so that a missing or
  // wrong file fails the daemon's start with its name.
  static absl::StatusOr<std::shared_ptr<const TlsSocketContext>> FromFiles(const TlsFiles& files);
  ~TlsSocketContext();

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  TlsSocketContext() = default;
  std::unique_ptr<Impl> impl_;
};

class TlsSocket {
 public:
  // Connects to host:port, handshakes (TLS when `context` is not null) and,
  // with TLS, checks that the server's certificate names `expect_peer`
  // ("/job:worker/task:1"). All within `timeout`. UNAVAILABLE when the peer
  // cannot be reached or hangs up, DEADLINE_EXCEEDED past `timeout`,
  // UNAUTHENTICATED when its certificate does not verify or names someone
  // else; each names host:port and the expected peer.
  static absl::StatusOr<std::unique_ptr<TlsSocket>> Connect(const TlsSocketContext* context, const std::string& host,
                                                            int port, const std::string& expect_peer,
                                                            absl::Duration timeout);
  // The server's side of an accepted connection (takes `fd`): handshakes
  // within `timeout` and, with TLS, requires a cluster member's certificate.
  // UNAUTHENTICATED for a missing, unverifiable or non-cluster certificate
  // (naming the remote address and, when known, the name it carries).
  static absl::StatusOr<std::unique_ptr<TlsSocket>> Accept(const TlsSocketContext* context, int fd,
                                                           absl::Duration timeout);
  ~TlsSocket();
  TlsSocket(const TlsSocket&) = delete;
  TlsSocket& operator=(const TlsSocket&) = delete;

  // Who is at the other end: the certificate's name; "" in plaintext.
  const std::string& peer() const { return peer_; }
  // "host:port" of the other end, for messages.
  const std::string& remote() const { return remote_; }

  // Writes every byte of every piece, blocking. UNAVAILABLE (naming the
  // peer) when the connection is gone or was shut down.
  absl::Status WriteAll(absl::Span<const absl::string_view> pieces);
  // Reads exactly `n` bytes into `out`, blocking. OUT_OF_RANGE when the
  // peer closed cleanly before the first byte (the end of its messages),
  // UNAVAILABLE when the connection ended mid-read, broke or was shut down.
  absl::Status ReadFull(char* out, size_t n);
  // Ends the connection both ways, waking a blocked read or write.
  void Shutdown();

  struct Impl;

 private:
  TlsSocket() = default;
  std::unique_ptr<Impl> impl_;
  std::string peer_;
  std::string remote_;
};

// A listening TCP socket.
class TlsListener {
 public:
  // Binds host:port (port 0: any free one; host "" or "0.0.0.0": every
  // address). INVALID_ARGUMENT for a host that is not an IP address,
  // UNAVAILABLE when the port cannot be bound (naming it).
  static absl::StatusOr<std::unique_ptr<TlsListener>> Listen(const std::string& host, int port);
  ~TlsListener();
  int port() const { return port_; }
  // The next connection's descriptor (for TlsSocket::Accept); CANCELLED
  // once Close was called.
  absl::StatusOr<int> AcceptFd();
  // Stops listening, waking a blocked AcceptFd.
  void Close();

 private:
  TlsListener() = default;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> closed_{false};
};

}  // namespace weft

#endif  // WEFT_COMMON_TLS_SOCKET_H_
