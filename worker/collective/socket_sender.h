// SocketSender: the sending end of the collective sockets for one
// destination task (SocketCollectiveTransport keeps one per peer address;
// its header tells the whole story), and the frame both ends speak.
//
// Thread-safety: thread-safe. `Stop` before the last reference goes; the
// context outlives every sender.
#ifndef WEFT_WORKER_COLLECTIVE_SOCKET_SENDER_H_
#define WEFT_WORKER_COLLECTIVE_SOCKET_SENDER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/tls_socket.h"
#include "worker/collective/collective_transport.h"

namespace weft {
namespace collective {

// Finds a peer's socket port (GrpcShmOfferer asks CollectiveService.
// SocketEndpoint).
class SocketEndpointsInterface {
 public:
  virtual ~SocketEndpointsInterface() = default;
  // The port the task serving `address` accepts sockets on, waiting at most
  // `timeout` for it to come up. FAILED_PRECONDITION when it has none.
  virtual absl::StatusOr<int> SocketPort(const std::string& address, absl::Duration timeout) = 0;
};

// A frame's header on the wire (this host's byte order), followed by
// payload_bytes of payload.
inline constexpr uint32_t kSocketFrameMagic = 0x31736677;  // "wfs1"
struct SocketFrameHeader {
  uint32_t magic;
  uint32_t reserved;  // zero
  uint64_t payload_bytes;
  int64_t group_key, instance_key, step_id;
  int32_t round, chunk, src_rank;
  char pad[12];  // zero
};
static_assert(sizeof(SocketFrameHeader) == 64);

class SocketSender {
 public:
  // What every sender of a process shares (borrowed).
  struct Context {
    CollectiveTransportInterface* fallback = nullptr;  // peers without sockets
    SocketEndpointsInterface* endpoints = nullptr;
    std::shared_ptr<const TlsSocketContext> tls;  // null: plaintext
    absl::Duration connect_timeout;
  };

  // `task`: the name the peer's certificate must carry; `describe`: the
  // peer in messages, "task /job:worker/task:1 (rank 1)".
  SocketSender(const Context* context, std::string address, std::string task, std::string describe);
  ~SocketSender();

  // CollectiveTransportInterface::SendAsync, for this destination.
  void Send(const CollectiveGroup& group, int dst, const ChunkKey& key, SendChunk chunk, StatusCallback done);
  // Fails what waits with CANCELLED, shuts the connection and joins the
  // writer (within about a second when it is connecting).
  void Stop();
  // Whether chunks go over a connection now.
  bool connected() const;

 private:
  struct Pending {
    ChunkKey key;
    SendChunk chunk;
    StatusCallback done;
  };

  static void FailAll(std::deque<Pending>* pending, const absl::Status& s);
  absl::StatusOr<std::unique_ptr<TlsSocket>> Connect();
  bool Stopping() const;
  void WriterLoop();
  absl::Status WriteBatch(TlsSocket* socket, std::deque<Pending>* batch);
  bool Refused() const;
  void RequeueToFallback();
  CollectiveGroup GroupOf(const Pending& p) const;

  const Context& ctx_;
  const std::string address_;
  const std::string task_;
  const std::string describe_;
  metrics::Counter* const sent_;
  std::thread writer_;  // started under mu_, joined by Stop
  std::string small_;   // the writer's: a small frame, whole (capacity kept)

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool refused_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  TlsSocket* socket_ ABSL_GUARDED_BY(mu_) = nullptr;  // the writer's, for Stop's Shutdown
};

}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_SOCKET_SENDER_H_
