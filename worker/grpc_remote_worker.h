// gRPC clients of WorkerService.
//
// GrpcRemoteWorker is WorkerInterface over a WorkerService stub: the master's
// handle on a remote task. Every call uses the callback API
// (stub->async()), carries a deadline (RunGraph: the timeout given; the
// others: `timeout`), and maps a failure to an absl::Status whose message
// starts "task <name>: " (UNAVAILABLE when the task cannot be reached).
//
// GrpcTensorPuller is the remote rendezvous's way to fetch a tensor from a
// peer: a RecvTensor call through a generic stub whose raw reply is decoded by
// worker/grpc_tensor_coding.h straight into a new tensor.
//
// Thread-safety: both are thread-safe. A call's request and response must
// outlive it (until `done`); the objects themselves need not.
#ifndef WEFT_WORKER_GRPC_REMOTE_WORKER_H_
#define WEFT_WORKER_GRPC_REMOTE_WORKER_H_

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/peer_metrics.h"
#include "grpcpp/channel.h"
#include "proto/cluster.pb.h"
#include "proto/ps_service.grpc.pb.h"
#include "proto/worker_service.grpc.pb.h"
#include "worker/collective/collective_mailbox.h"
#include "worker/grpc_channel_cache.h"
#include "worker/pull_deadlines.h"
#include "worker/remote_rendezvous.h"
#include "worker/worker_interface.h"

namespace weft {
namespace worker {

// Deadline of the control calls (everything but RunGraph and RecvTensor).
inline constexpr absl::Duration kDefaultWorkerCallTimeout = absl::Seconds(60);
// How long a pull may wait for its value to be produced on the peer.
inline constexpr absl::Duration kDefaultRecvTensorTimeout = absl::Minutes(10);

class GrpcRemoteWorker final : public WorkerInterface {
 public:
  // `task`: "/job:worker/task:1", for messages.
  GrpcRemoteWorker(std::string task, std::shared_ptr<grpc::Channel> channel,
                   absl::Duration timeout = kDefaultWorkerCallTimeout);

  const std::string& task() const override { return task_; }
  void GetStatusAsync(const GetStatusRequest* request, GetStatusResponse* response, StatusCallback done) override;
  void RegisterGraphAsync(const RegisterGraphRequest* request, RegisterGraphResponse* response,
                          StatusCallback done) override;
  void DeregisterGraphAsync(const DeregisterGraphRequest* request, DeregisterGraphResponse* response,
                            StatusCallback done) override;
  void RunGraphAsync(const RunGraphRequest* request, RunGraphResponse* response, absl::Duration timeout,
                     StatusCallback done) override;
  void AbortStepAsync(const AbortStepRequest* request, AbortStepResponse* response, StatusCallback done) override;
  void CleanupStepAsync(const CleanupStepRequest* request, CleanupStepResponse* response,
                        StatusCallback done) override;
  void GetStepStateAsync(const GetStepStateRequest* request, GetStepStateResponse* response, absl::Duration timeout,
                         StatusCallback done) override;
  void ResetContainersAsync(const ResetContainersRequest* request, ResetContainersResponse* response,
                            StatusCallback done) override;
  void PutDatasetAsync(const PutDatasetRequest* request, PutDatasetResponse* response, StatusCallback done) override;
  void ListShardsAsync(const ListShardsRequest* request, ListShardsResponse* response, StatusCallback done) override;
  void SaveShardAsync(const SaveShardRequest* request, SaveShardResponse* response, StatusCallback done) override;
  void RestoreShardAsync(const RestoreShardRequest* request, RestoreShardResponse* response,
                         StatusCallback done) override;

 private:
  const std::string task_;
  const std::unique_ptr<WorkerService::Stub> stub_;
  const std::unique_ptr<ParameterServer::Stub> ps_stub_;  // same channel
  const absl::Duration timeout_;
};

// A GrpcRemoteWorker for `task` of `cluster`, on `channels`' shared channel.
// `channels` (borrowed) outlives the call only.
absl::StatusOr<std::unique_ptr<GrpcRemoteWorker>> NewGrpcRemoteWorker(const ClusterDef& cluster,
                                                                      const std::string& task,
                                                                      ChannelCache* channels);

class GrpcTensorPuller final : public TensorPullerInterface {
 public:
  // `channels` (borrowed) outlives the puller.
  GrpcTensorPuller(ClusterDef cluster, ChannelCache* channels, absl::Duration timeout = kDefaultRecvTensorTimeout);

  std::function<void()> PullAsync(const std::string& task, int64_t step_id, const std::string& key,
                                  Rendezvous::DoneCallback done) override;

  // Replaces the peer addresses (e.g. once servers started on port 0 know
  // their ports). Pulls already started keep their channel.
  void SetCluster(ClusterDef cluster);

  // Asks every pull's peer for the tensor through shared memory as well
  // (RecvTensorRequest.shm_pull_id), waiting for it in `mailbox`, where the
  // task's rings deliver (collective::WorkerCollectives::shm_mailbox; null:
  // never). Set before the first pull.
  void SetShmMailbox(collective::CollectiveMailbox* mailbox) { shm_mailbox_ = mailbox; }
  // Sends a pull's request through shared memory instead of gRPC when it
  // can (collective::WorkerCollectives::SendPullRequestThroughRing: true,
  // `done` taken) so that neither the request nor the reply touches gRPC.
  // Needs the mailbox. Set before the first pull.
  using RingRequester = std::function<bool(const std::string& task, int64_t step_id, uint64_t pull_id,
                                           std::string request, StatusCallback& done)>;
  void SetRingRequester(RingRequester requester) { ring_requester_ = std::move(requester); }
  // Pulls whose request went through a ring (for tests and the bench).
  uint64_t ring_pulls() const { return ring_pulls_.load(std::memory_order_relaxed); }

 private:
  ChannelCache* const channels_;
  const absl::Duration timeout_;
  collective::CollectiveMailbox* shm_mailbox_ = nullptr;
  RingRequester ring_requester_;
  // The timeout of pulls through rings (gRPC's deadline covers the others).
  // A pull it expires is failed through the mailbox, which the task's
  // collectives abort, finishing every waiting pull, before they go.
  PullDeadlines ring_deadlines_{timeout_};
  std::atomic<uint64_t> next_pull_id_{1};
  std::atomic<uint64_t> ring_pulls_{0};
  absl::Mutex mu_;
  ClusterDef cluster_ ABSL_GUARDED_BY(mu_);
  // Per peer task: bytes pulled and time per pull (common/peer_metrics.h).
  std::map<std::string, PeerSeries> peers_ ABSL_GUARDED_BY(mu_);
  // Peers pulled from through rings both ways.
  std::set<std::string> ring_peers_ ABSL_GUARDED_BY(mu_);
  // Counts a pull through a ring; logs the first from each peer.
  void CountRingPull(const std::string& task);
};

// "/weft.WorkerService/RecvTensor": the raw method both ends use.
extern const char kRecvTensorMethod[];

}  // namespace worker
}  // namespace weft

#endif  // WEFT_WORKER_GRPC_REMOTE_WORKER_H_
