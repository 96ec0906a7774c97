// WorkerCollectives: a task's CollectiveRuntime. It owns the mailbox that
// incoming chunks land in, the CollectiveService that receives them
// (registered on the task's server), the transports that carry chunks to
// ring neighbours (shared-memory rings to tasks on this host, sockets of
// its own to the others, gRPC streams to a peer that takes neither), and
// the executor that runs the ring. Group members are
// named by task; their addresses come from the cluster.
//
// Thread-safety: thread-safe. Shutdown order: Abort (wakes every waiting
// collective), then destroy this after the server stops.
#ifndef WEFT_WORKER_COLLECTIVE_WORKER_COLLECTIVES_H_
#define WEFT_WORKER_COLLECTIVE_WORKER_COLLECTIVES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "proto/cluster.pb.h"
#include "runtime/collective_runtime.h"
#include "worker/collective/collective_executor.h"
#include "worker/collective/collective_mailbox.h"
#include "worker/collective/grpc_collective_service.h"
#include "worker/collective/grpc_collective_transport.h"
#include "worker/collective/grpc_shm_offerer.h"
#include "worker/collective/shm_collective_transport.h"
#include "worker/collective/socket_collective_transport.h"

namespace weft {
namespace collective {

class WorkerCollectives final : public CollectiveRuntime {
 public:
  struct Options {
    // How long a collective may take.
    absl::Duration timeout = absl::Seconds(60);
    // The task's mTLS (null: insecure); chunks are then accepted only from
    // the task the group expects at each rank.
    std::shared_ptr<const TransportSecurity> security;
    // The mailbox's quota on chunks that arrive before their receive
    // (CollectiveMailbox).
    size_t max_pending_bytes = CollectiveMailbox::kDefaultMaxBufferedBytes;
    // Chunks to tasks on this host go through shared-memory rings
    // (ShmCollectiveTransport), and this task accepts the rings of others;
    // false: never.
    bool shared_memory = true;
    // Chunks to tasks on other hosts go over sockets this task owns
    // (SocketCollectiveTransport), and it accepts them on
    // socket_host:socket_port (port 0: any free one); false: gRPC Exchange
    // streams.
    bool sockets = true;
    std::string socket_host;
    int socket_port = 0;
  };

  WorkerCollectives(std::string task, ClusterDef cluster, Options options);
  ~WorkerCollectives() override;

  grpc::Service* service() { return &service_; }
  // Why the socket listener could not start (the task must not serve
  // then); OK otherwise, or with sockets off.
  const absl::Status& start_status() const { return start_status_; }
  // The port sockets are accepted on; 0 with sockets off.
  int socket_port() const { return socket_ != nullptr ? socket_->port() : 0; }
  // Where chunks to this task land (RecvTensor replies through shared
  // memory wait here too); null when shared memory is off.
  CollectiveMailbox* shm_mailbox() { return shared_memory_ ? &mailbox_ : nullptr; }
  // Sends the RecvTensor reply `header` + `value` for pull `pull_id` of
  // `step_id` to task `task` through its shared-memory ring, if it has one
  // now: true, and `done` taken (it runs once the bytes are in the ring, or
  // with the error that kept them out). False, `done` untouched, when the
  // reply must go over gRPC.
  bool SendTensorThroughRing(const std::string& task, int64_t step_id, uint64_t pull_id, const Tensor& value,
                             std::string header, StatusCallback& done);
  // Sends RecvTensor request `request` (serialized, for pull `pull_id` of
  // `step_id`) to task `task` through its shared-memory ring, if this task
  // has a ring to it now and it has one to this task for the reply: true,
  // and `done` taken (it runs once the bytes are in the ring, or with the
  // error that kept them out). False, `done` untouched: ask over gRPC.
  bool SendPullRequestThroughRing(const std::string& task, int64_t step_id, uint64_t pull_id, std::string request,
                                  StatusCallback& done);
  // Where RecvTensor requests that come through rings go
  // (ShmCollectiveTransport::RequestHandler). REQUIRES: before the task
  // serves; a no-op with shared memory off.
  void SetPullRequestHandler(ShmCollectiveTransport::RequestHandler handler);
  void SetCluster(ClusterDef cluster);

  void AllReduceAsync(const AllReduceArgs& args, std::vector<Tensor*> tensors,
                      std::function<void(const absl::Status&)> done) override;
  void AbortStep(int64_t step_id, const absl::Status& status) override;
  void CleanupStep(int64_t step_id) override;
  std::vector<CollectiveWait> Pending() const override;
  // Fails every collective under way and any started later, then closes the
  // streams to peers so that their servers can stop without waiting.
  // REQUIRES: no kernel will call AllReduceAsync any more (the Worker has
  // shut down), so no call races with the executor's destruction.
  void Close(const absl::Status& status);

 private:
  absl::Status StartSockets(const Options& options);
  // `chunk` under `key` to task `task` through its ring, if it has one now
  // (and, with `needs_ring_back`, one from it that carries messages):
  // ShmCollectiveTransport::TrySendThroughRing's contract.
  bool SendThroughRing(const std::string& task, const ChunkKey& key, SendChunk chunk, bool needs_ring_back,
                       StatusCallback& done);

  const std::string task_;
  const absl::Duration timeout_;
  mutable absl::Mutex mu_;
  ClusterDef cluster_ ABSL_GUARDED_BY(mu_);
  // Declaration order is destruction order, reversed.
  CollectiveMailbox mailbox_;
  GrpcCollectiveService service_;
  std::unique_ptr<GrpcCollectiveTransport> network_;
  GrpcShmOfferer offerer_;
  std::unique_ptr<SocketCollectiveTransport> socket_;  // null: off, or not listening
  absl::Status start_status_;
  const bool shared_memory_;
  // Guards shm_'s reset (Close) against the RecvTensor and AttachShm paths.
  mutable absl::Mutex shm_mu_;
  std::unique_ptr<ShmCollectiveTransport> shm_ ABSL_GUARDED_BY(shm_mu_);  // null: off, or closed
  CollectiveTransportInterface* transport_;      // shm_ or network_
  std::unique_ptr<CollectiveExecutor> executor_ ABSL_GUARDED_BY(mu_);  // null once closed
};

}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_WORKER_COLLECTIVES_H_
