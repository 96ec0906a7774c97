#include "worker/grpc_remote_worker.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/peer_metrics.h"
#include "common/status_macros.h"
#include "grpcpp/generic/generic_stub.h"
#include "worker/collective/shm_offer.h"
#include "worker/grpc_tensor_coding.h"

namespace weft {
namespace worker {

const char kRecvTensorMethod[] = "/weft.WorkerService/RecvTensor";

namespace {

using GrpcDone = std::function<void(grpc::Status)>;

// Starts a unary call with a deadline; the context lives until completion.
template <typename StartFn>
void Call(const std::string& task, absl::Duration timeout, StatusCallback done, StartFn start) {
  auto* ctx = new grpc::ClientContext();
  SetDeadline(ctx, timeout);
  start(ctx, [ctx, task, done = std::move(done)](grpc::Status s) {
    delete ctx;
    done(FromGrpcStatus(s, task));
  });
}

}  // namespace

GrpcRemoteWorker::GrpcRemoteWorker(std::string task, std::shared_ptr<grpc::Channel> channel, absl::Duration timeout)
    : task_(std::move(task)),
      stub_(WorkerService::NewStub(channel)),
      ps_stub_(ParameterServer::NewStub(channel)),
      timeout_(timeout) {}

void GrpcRemoteWorker::PutDatasetAsync(const PutDatasetRequest* request, PutDatasetResponse* response,
                                       StatusCallback done) {
  Call(task_, timeout_, std::move(done), [&](grpc::ClientContext* ctx, GrpcDone cb) {
    stub_->async()->PutDataset(ctx, request, response, std::move(cb));
  });
}

void GrpcRemoteWorker::ListShardsAsync(const ListShardsRequest* request, ListShardsResponse* response,
                                       StatusCallback done) {
  Call(task_, timeout_, std::move(done), [&](grpc::ClientContext* ctx, GrpcDone cb) {
    ps_stub_->async()->ListShards(ctx, request, response, std::move(cb));
  });
}

void GrpcRemoteWorker::SaveShardAsync(const SaveShardRequest* request, SaveShardResponse* response,
                                      StatusCallback done) {
  Call(task_, timeout_, std::move(done), [&](grpc::ClientContext* ctx, GrpcDone cb) {
    ps_stub_->async()->SaveShard(ctx, request, response, std::move(cb));
  });
}

void GrpcRemoteWorker::RestoreShardAsync(const RestoreShardRequest* request, RestoreShardResponse* response,
                                         StatusCallback done) {
  Call(task_, timeout_, std::move(done), [&](grpc::ClientContext* ctx, GrpcDone cb) {
    ps_stub_->async()->RestoreShard(ctx, request, response, std::move(cb));
  });
}

void GrpcRemoteWorker::GetStatusAsync(const GetStatusRequest* request, GetStatusResponse* response,
                                      StatusCallback done) {
  Call(task_, timeout_, std::move(done), [&](grpc::ClientContext* ctx, GrpcDone cb) {
    stub_->async()->GetStatus(ctx, request, response, std::move(cb));
  });
}

void GrpcRemoteWorker::RegisterGraphAsync(const RegisterGraphRequest* request, RegisterGraphResponse* response,
                                          StatusCallback done) {
  Call(task_, timeout_, std::move(done), [&](grpc::ClientContext* ctx, GrpcDone cb) {
    stub_->async()->RegisterGraph(ctx, request, response, std::move(cb));
  });
}

void GrpcRemoteWorker::DeregisterGraphAsync(const DeregisterGraphRequest* request, DeregisterGraphResponse* response,
                                            StatusCallback done) {
  Call(task_, timeout_, std::move(done), [&](grpc::ClientContext* ctx, GrpcDone cb) {
    stub_->async()->DeregisterGraph(ctx, request, response, std::move(cb));
  });
}

void GrpcRemoteWorker::RunGraphAsync(const RunGraphRequest* request, RunGraphResponse* response,
                                     absl::Duration timeout, StatusCallback done) {
  Call(task_, timeout, std::move(done), [&](grpc::ClientContext* ctx, GrpcDone cb) {
    stub_->async()->RunGraph(ctx, request, response, std::move(cb));
  });
}

void GrpcRemoteWorker::AbortStepAsync(const AbortStepRequest* request, AbortStepResponse* response,
                                      StatusCallback done) {
  Call(task_, timeout_, std::move(done), [&](grpc::ClientContext* ctx, GrpcDone cb) {
    stub_->async()->AbortStep(ctx, request, response, std::move(cb));
  });
}

void GrpcRemoteWorker::CleanupStepAsync(const CleanupStepRequest* request, CleanupStepResponse* response,
                                        StatusCallback done) {
  Call(task_, timeout_, std::move(done), [&](grpc::ClientContext* ctx, GrpcDone cb) {
    stub_->async()->CleanupStep(ctx, request, response, std::move(cb));
  });
}

void GrpcRemoteWorker::GetStepStateAsync(const GetStepStateRequest* request, GetStepStateResponse* response,
                                         absl::Duration timeout, StatusCallback done) {
  Call(task_, std::min(timeout, timeout_), std::move(done), [&](grpc::ClientContext* ctx, GrpcDone cb) {
    stub_->async()->GetStepState(ctx, request, response, std::move(cb));
  });
}

void GrpcRemoteWorker::ResetContainersAsync(const ResetContainersRequest* request, ResetContainersResponse* response,
                                            StatusCallback done) {
  Call(task_, timeout_, std::move(done), [&](grpc::ClientContext* ctx, GrpcDone cb) {
    stub_->async()->ResetContainers(ctx, request, response, std::move(cb));
  });
}

absl::StatusOr<std::unique_ptr<GrpcRemoteWorker>> NewGrpcRemoteWorker(const ClusterDef& cluster,
                                                                      const std::string& task,
                                                                      ChannelCache* channels) {
  ASSIGN_OR_RETURN(std::string address, TaskAddress(cluster, task));
  return std::make_unique<GrpcRemoteWorker>(task, channels->Get(address));
}

GrpcTensorPuller::GrpcTensorPuller(ClusterDef cluster, ChannelCache* channels, absl::Duration timeout)
    : channels_(channels), timeout_(timeout), cluster_(std::move(cluster)) {}

void GrpcTensorPuller::SetCluster(ClusterDef cluster) {
  absl::MutexLock lock(&mu_);
  cluster_ = std::move(cluster);
}

namespace {

// One RecvTensor call; shared by its completion callback, its canceller and
// (through shared memory) the mailbox receive of its reply.
struct PullCall {
  std::optional<grpc::ClientContext> ctx;  // a pull over gRPC only
  std::unique_ptr<grpc::GenericStub> stub;  // holds the channel
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;

  // The reply may come two ways; `done` runs once, for whichever settles
  // it: the RPC's error, the tensor in the RPC's reply, or the tensor in
  // the mailbox after the reply said it went there (or before).
  Rendezvous::DoneCallback done;
  std::string task;
  PeerSeries* series = nullptr;
  std::chrono::steady_clock::time_point start;
  int64_t step_id = 0;
  collective::CollectiveMailbox* mailbox = nullptr;  // set with pull_id
  uint64_t pull_id = 0;                              // 0: no reply through shared memory
  absl::Mutex mu;
  bool finished ABSL_GUARDED_BY(mu) = false;
  bool reply_in_shm ABSL_GUARDED_BY(mu) = false;      // the RPC said "in shared memory"
  std::optional<absl::Status> mailbox_failed ABSL_GUARDED_BY(mu);  // the receive was aborted
  // The reply's parts so far (used by one mailbox callback at a time).
  RecvTensorAssembler assembler;

  // Takes `done` if nobody has yet.
  Rendezvous::DoneCallback TakeDone() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (finished) return nullptr;
    finished = true;
    return std::move(done);
  }
};


void Deliver(const std::shared_ptr<PullCall>& call, Rendezvous::DoneCallback done,
             absl::StatusOr<ReceivedTensor> got) {
  if (!got.ok()) return done(got.status(), Tensor(), false);
  call->series->recv_tensor_seconds->Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - call->start).count());
  done(absl::OkStatus(), got->value, got->is_dead);
}

void ReceiveReplyPart(const std::shared_ptr<PullCall>& call, int32_t part);

// Part `part` of the reply through shared memory (or the receive's abort).
// Decoding copies the tensor out of the ring; a reply over half a ring
// comes in parts (collective::SplitMessage), each asked for once the one
// before it is in.
void OnReplyInMailbox(const std::shared_ptr<PullCall>& call, int32_t part, const absl::Status& s,
                      const collective::ReceivedChunk& chunk) {
  absl::Status decoded;
  if (s.ok()) {
    decoded = part == 0 ? call->assembler.Begin(chunk.pieces, /*more_parts=*/true) : call->assembler.Add(chunk.pieces);
    if (decoded.ok() && !call->assembler.complete()) return ReceiveReplyPart(call, part + 1);
    if (!decoded.ok()) decoded = Annotate(decoded, "task " + call->task);
  }
  Rendezvous::DoneCallback done;
  {
    absl::MutexLock lock(&call->mu);
    if (!s.ok() && !call->reply_in_shm) {
      call->mailbox_failed = s;  // the RPC's reply settles it
      return;
    }
    done = call->TakeDone();
  }
  if (!done) return;
  if (!s.ok()) return Deliver(call, std::move(done), s);
  if (!decoded.ok()) return Deliver(call, std::move(done), decoded);
  Deliver(call, std::move(done), call->assembler.Take());
}

void ReceiveReplyPart(const std::shared_ptr<PullCall>& call, int32_t part) {
  collective::ChunkKey key = collective::RecvTensorChunkKey(call->pull_id, call->step_id);
  key.chunk = part;
  // Only `task` (authenticated by its ring) can satisfy it.
  call->mailbox->RecvAsync(
      key,
      [call, part](const absl::Status& s, collective::ReceivedChunk chunk) { OnReplyInMailbox(call, part, s, chunk); },
      call->task);
}

// The RPC's reply: the tensor, or word that it went through shared memory.
void OnRecvTensorReply(const std::shared_ptr<PullCall>& call, const grpc::Status& s) {
  absl::StatusOr<ReceivedTensor> got = absl::StatusOr<ReceivedTensor>(absl::UnknownError("unset"));
  if (!s.ok()) {
    got = FromGrpcStatus(s, call->task);
  } else {
    call->series->received->Increment(static_cast<double>(call->response.Length()));
    got = DecodeRecvTensorResponse(call->response);
    call->response.Clear();  // the received slices
    if (!got.ok()) got = Annotate(got.status(), "task " + call->task);
  }
  const bool in_shm = got.ok() && got->in_shm;
  Rendezvous::DoneCallback done;
  {
    absl::MutexLock lock(&call->mu);
    if (in_shm && !call->mailbox_failed.has_value()) {
      call->reply_in_shm = true;  // the mailbox receive finishes the pull
      return;
    }
    if (in_shm) got = *call->mailbox_failed;
    done = call->TakeDone();
  }
  // Withdraw the receive the reply did not use (a no-op once it is done).
  if (call->pull_id != 0) {
    call->mailbox->AbortCollective(collective::RecvTensorChunkKey(call->pull_id, call->step_id),
                                   absl::CancelledError("the RecvTensor reply came over gRPC"));
  }
  if (done) Deliver(call, std::move(done), std::move(got));
}

// Sends the request through the ring to the peer, whose reply can then
// come only through its ring to this task: true when it went. A failure to
// write the request, or the ring from the peer closing (the mailbox fails
// the receive), ends the pull with that error.
bool AskThroughRing(const std::shared_ptr<PullCall>& call, const RecvTensorRequest& request,
                    const GrpcTensorPuller::RingRequester& requester) {
  StatusCallback written = [call](const absl::Status& s) {
    if (s.ok()) return;
    call->mailbox->AbortCollective(collective::RecvTensorChunkKey(call->pull_id, call->step_id),
                                   Annotate(s, "the RecvTensor request to task " + call->task));
  };
  if (!requester(call->task, call->step_id, call->pull_id, request.SerializeAsString(), written)) return false;
  Rendezvous::DoneCallback done;
  absl::Status failed;
  {
    absl::MutexLock lock(&call->mu);
    call->reply_in_shm = true;  // no RPC: the mailbox settles the pull
    if (call->mailbox_failed.has_value()) {
      failed = *call->mailbox_failed;
      done = call->TakeDone();
    }
  }
  if (done) Deliver(call, std::move(done), failed);
  return true;
}

}  // namespace

std::function<void()> GrpcTensorPuller::PullAsync(const std::string& task, int64_t step_id, const std::string& key,
                                                  Rendezvous::DoneCallback done) {
  absl::StatusOr<std::string> address;
  PeerSeries* series = nullptr;
  {
    absl::MutexLock lock(&mu_);
    address = TaskAddress(cluster_, task);
    auto it = peers_.find(task);
    if (it == peers_.end()) it = peers_.emplace(task, PeerTraffic(task, "recv_tensor")).first;
    series = &it->second;  // node-stable: the map only grows
  }
  if (!address.ok()) {
    done(address.status(), Tensor(), false);
    return nullptr;
  }
  auto call = std::make_shared<PullCall>();
  call->done = std::move(done);
  RecvTensorRequest request;
  request.set_step_id(step_id);
  request.set_rendezvous_key(key);
  call->task = task;
  call->series = series;
  call->start = std::chrono::steady_clock::now();
  call->step_id = step_id;
  call->mailbox = shm_mailbox_;
  if (call->mailbox != nullptr) {
    // Waits before asking, so the reply never arrives unexpected.
    call->pull_id = next_pull_id_.fetch_add(1, std::memory_order_relaxed);
    request.set_shm_pull_id(call->pull_id);
    ReceiveReplyPart(call, 0);
    if (ring_requester_ && AskThroughRing(call, request, ring_requester_)) {
      CountRingPull(task);
      std::weak_ptr<PullCall> weak = call;
      ring_deadlines_.Add(
          [weak] {
            std::shared_ptr<PullCall> c = weak.lock();
            if (c == nullptr) return true;
            absl::MutexLock lock(&c->mu);
            return c->finished;
          },
          [weak, timeout = timeout_] {
            std::shared_ptr<PullCall> c = weak.lock();
            if (c == nullptr) return;
            c->mailbox->AbortCollective(
                collective::RecvTensorChunkKey(c->pull_id, c->step_id),
                absl::DeadlineExceededError(absl::StrCat("RecvTensor from task ", c->task,
                                                         " through shared memory: no reply within ",
                                                         absl::FormatDuration(timeout))));
          });
      return [call] {
        call->mailbox->AbortCollective(collective::RecvTensorChunkKey(call->pull_id, call->step_id),
                                       absl::CancelledError("the pull was cancelled"));
      };
    }
  }
  call->stub = std::make_unique<grpc::GenericStub>(channels_->Get(*address));
  grpc::Slice slice(request.SerializeAsString());
  call->request = grpc::ByteBuffer(&slice, 1);
  call->ctx.emplace();
  SetDeadline(&*call->ctx, timeout_);
  call->stub->UnaryCall(&*call->ctx, kRecvTensorMethod, grpc::StubOptions(), &call->request, &call->response,
                        [call](grpc::Status s) { OnRecvTensorReply(call, s); });
  return [call] { call->ctx->TryCancel(); };
}

void GrpcTensorPuller::CountRingPull(const std::string& task) {
  ring_pulls_.fetch_add(1, std::memory_order_relaxed);
  {
    absl::MutexLock lock(&mu_);
    if (!ring_peers_.insert(task).second) return;
  }
  Logger("worker")->info("RecvTensor pulls from task {} go through shared memory both ways", task);
}

}  // namespace worker
}  // namespace weft
