#include "worker/grpc_remote_worker.h"

#include <chrono>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/peer_metrics.h"
#include "common/status_macros.h"
#include "grpcpp/generic/generic_stub.h"
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

// One RecvTensor call; shared by its completion callback and its canceller.
struct PullCall {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::GenericStub> stub;  // holds the channel
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
};

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
  call->stub = std::make_unique<grpc::GenericStub>(channels_->Get(*address));
  RecvTensorRequest request;
  request.set_step_id(step_id);
  request.set_rendezvous_key(key);
  grpc::Slice slice(request.SerializeAsString());
  call->request = grpc::ByteBuffer(&slice, 1);
  SetDeadline(&call->ctx, timeout_);
  call->stub->UnaryCall(&call->ctx, kRecvTensorMethod, grpc::StubOptions(), &call->request, &call->response,
                        [call, task, series, start = std::chrono::steady_clock::now(),
                         done = std::move(done)](grpc::Status s) {
                          if (!s.ok()) return done(FromGrpcStatus(s, task), Tensor(), false);
                          series->received->Increment(static_cast<double>(call->response.Length()));
                          series->recv_tensor_seconds->Observe(
                              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
                          auto got = DecodeRecvTensorResponse(call->response);
                          call->response.Clear();  // the received slices
                          if (!got.ok()) return done(Annotate(got.status(), "task " + task), Tensor(), false);
                          done(absl::OkStatus(), got->value, got->is_dead);
                        });
  return [call] { call->ctx.TryCancel(); };
}

}  // namespace worker
}  // namespace weft
