// SocketCollectiveTransport: collective chunks between hosts over
// connections this process owns (common/tls_socket.h), one per peer, with
// gRPC left to the control plane.
//
// Sending. The first chunk to a peer asks it, over the cluster's
// authenticated gRPC channel (CollectiveService.SocketEndpoint, through
// SocketEndpointsInterface), which port it accepts sockets on, then
// connects to that port on the host of the peer's gRPC address and
// handshakes: mutual TLS on the cluster's certificates, the server's naming
// exactly the task the group expects at that rank. Chunks wait meanwhile.
// A writer thread per peer then writes each chunk as one frame: a 64-byte
// header (magic, length, the chunk's key) and the payload straight out of
// the sender's tensor, back to back, with no per-chunk reply. A peer that
// has no socket listener (FAILED_PRECONDITION, an older weft's
// UNIMPLEMENTED) gets every chunk over the fallback transport (gRPC
// Exchange) for good; one that cannot be reached within the connect timeout
// fails what waits with UNAVAILABLE naming it, and the next send tries
// again, as a broken gRPC stream is reopened.
//
// Receiving. A listener thread accepts connections, at most
// Options::max_connections at once; each gets a reader thread that
// handshakes (cluster members only), reads each frame into a buffer of its
// own from the caching allocator and delivers it to the mailbox under the
// name on the peer's certificate: a collective waiting for it sums it on
// that thread, and one that arrives early waits as it is, uncopied. A
// frame with a bad header or a length over Options::max_frame_bytes is
// DATA_LOSS: the connection is closed (and logged) before anything is
// allocated, and the daemon goes on. A chunk over the mailbox's quota
// closes the connection likewise; the sender's next chunks fail.
//
// Failure. A peer's process that exits closes its end: the reader sees the
// end of the stream, and the writer's next write fails with UNAVAILABLE
// naming the peer, failing what was queued for it. TCP keepalives and a
// user timeout (common/tls_socket.h) notice a host that vanished.
//
// Frames are in this host's byte order; every weft platform (x86-64,
// aarch64) is little-endian.
//
// Thread-safety: thread-safe. The fallback transport, mailbox and
// endpoints (borrowed) outlive this; the destructor stops the listener,
// shuts every connection, fails what is queued with CANCELLED and joins
// every thread.
#ifndef WEFT_WORKER_COLLECTIVE_SOCKET_COLLECTIVE_TRANSPORT_H_
#define WEFT_WORKER_COLLECTIVE_SOCKET_COLLECTIVE_TRANSPORT_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tls_socket.h"
#include "worker/collective/collective_mailbox.h"
#include "worker/collective/collective_transport.h"
#include "worker/collective/socket_sender.h"

namespace weft {
namespace collective {

class SocketCollectiveTransport final : public CollectiveTransportInterface {
 public:
  struct Options {
    // The cluster's certificates; null: plaintext (an insecure cluster).
    std::shared_ptr<const TlsSocketContext> tls;
    // Where to listen: an IP address ("" or "0.0.0.0": all) and a port (0:
    // any free one).
    std::string listen_host;
    int listen_port = 0;
    // Borrowed; outlives the transport.
    SocketEndpointsInterface* endpoints = nullptr;
    // Connecting and handshaking, each way.
    absl::Duration connect_timeout = absl::Seconds(10);
    // The largest frame a peer may send (a chunk is at most
    // CollectiveParams::chunk_bytes).
    size_t max_frame_bytes = size_t{64} << 20;
    // Incoming connections open at once (each has a thread).
    int max_connections = 256;
  };

  // Starts listening. UNAVAILABLE when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<SocketCollectiveTransport>> Create(CollectiveTransportInterface* fallback,
                                                                           CollectiveMailbox* mailbox,
                                                                           Options options);
  ~SocketCollectiveTransport() override;
  SocketCollectiveTransport(const SocketCollectiveTransport&) = delete;
  SocketCollectiveTransport& operator=(const SocketCollectiveTransport&) = delete;

  // The port this process accepts sockets on (for SocketEndpoint).
  int port() const { return listener_->port(); }

  void SendAsync(const CollectiveGroup& group, int dst, const ChunkKey& key, SendChunk chunk,
                 StatusCallback done) override;

  // For tests: peers whose chunks go over a socket now, and incoming
  // connections whose readers still run.
  int NumSocketPeers() const;
  int NumIncomingConnections() const;

 private:
  struct InConn;

  SocketCollectiveTransport(CollectiveTransportInterface* fallback, CollectiveMailbox* mailbox, Options options,
                            std::unique_ptr<TlsListener> listener);
  void AcceptLoop();
  void ReadLoop(InConn* in);

  CollectiveTransportInterface* const fallback_;
  CollectiveMailbox* const mailbox_;
  const Options options_;
  SocketSender::Context context_;  // the senders' (set once)
  const std::unique_ptr<TlsListener> listener_;
  std::thread acceptor_;

  mutable absl::Mutex mu_;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::shared_ptr<SocketSender>> peers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<InConn>> incoming_ ABSL_GUARDED_BY(mu_);
};

}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_SOCKET_COLLECTIVE_TRANSPORT_H_
