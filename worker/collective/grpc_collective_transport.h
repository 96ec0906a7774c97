// GrpcCollectiveTransport: sends collective chunks to peers over
// CollectiveService.Exchange streams.
//
// One long-lived stream per peer address carries every chunk this process
// sends there, for every collective, in order; it opens on the first send
// (waiting for the peer's server to come up, so ranks may start in any
// order) and reopens on the next send after it broke. Each chunk is a
// ByteBuffer whose payload slice points into the sender's tensor
// (chunk_coding.h); writes go out one at a time from a queue, and a send's
// `done` runs when gRPC has written it to the socket. When a stream ends
// with an error, every chunk queued on it fails with that error, naming the
// peer's task and address: UNAVAILABLE when the peer is gone.
//
// Channels have their own arguments (BulkTransferChannelArgs on top of
// weft's limits), so bulk chunks use their own connection, not the one that
// carries the worker's control RPCs.
//
// The receiving side is GrpcCollectiveService with a CollectiveMailbox.
//
// Thread-safety: thread-safe. The destructor closes each stream once its
// queue has drained (cancelling any stream still busy after
// Options::close_timeout, or at once when it is still waiting for its peer)
// and returns when every stream has finished.
#ifndef WEFT_WORKER_COLLECTIVE_GRPC_COLLECTIVE_TRANSPORT_H_
#define WEFT_WORKER_COLLECTIVE_GRPC_COLLECTIVE_TRANSPORT_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "worker/collective/collective_transport.h"

namespace weft {
namespace collective {

// HTTP/2 settings for bulk chunks, used on both ends: large frames (fewer
// frame headers and wake-ups per MiB) and a large flow-control window.
std::vector<std::pair<std::string, int>> BulkTransferChannelArgs();

class GrpcCollectiveTransport final : public CollectiveTransportInterface {
 public:
  struct Options {
    absl::Duration close_timeout = absl::Seconds(5);
    // The process's TLS credentials (null: plaintext).
    std::shared_ptr<grpc::ChannelCredentials> credentials;
  };

  GrpcCollectiveTransport() : GrpcCollectiveTransport(Options()) {}
  explicit GrpcCollectiveTransport(Options options);
  ~GrpcCollectiveTransport() override;
  GrpcCollectiveTransport(const GrpcCollectiveTransport&) = delete;
  GrpcCollectiveTransport& operator=(const GrpcCollectiveTransport&) = delete;

  void SendAsync(const CollectiveGroup& group, int dst, const ChunkKey& key, SendChunk chunk,
                 StatusCallback done) override;

 private:
  class PeerStream;

  // The open stream to `address`, opened if needed.
  std::shared_ptr<PeerStream> StreamTo(const std::string& address, const std::string& peer,
                                       const std::string& peer_task);
  // Called by a stream once it has finished.
  void StreamDone(PeerStream* stream);

  const Options options_;
  absl::Mutex mu_;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<PeerStream>> streams_ ABSL_GUARDED_BY(mu_);
  // Streams not yet finished, open or closing.
  absl::flat_hash_map<PeerStream*, std::shared_ptr<PeerStream>> live_ ABSL_GUARDED_BY(mu_);
};

}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_GRPC_COLLECTIVE_TRANSPORT_H_
