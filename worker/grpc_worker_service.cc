#include "worker/grpc_worker_service.h"

#include <memory>

#include "absl/synchronization/mutex.h"
#include "common/grpc_util.h"
#include "worker/grpc_tensor_coding.h"

namespace weft {
namespace worker {
namespace {

// Finishes a default reactor with the Worker's status.
StatusCallback FinishWith(grpc::ServerUnaryReactor* reactor) {
  return [reactor](const absl::Status& s) { reactor->Finish(ToGrpcStatus(s)); };
}

// RecvTensor's reactor. The rendezvous may answer long after the client has
// gone; whichever of the answer and the cancellation comes first finishes the
// call, and the other finds `finished` set and leaves the reactor alone (it
// may be deleted by then: only `State` outlives it).
class RecvTensorReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit RecvTensorReactor(grpc::ByteBuffer* response) : state_(std::make_shared<State>()) {
    state_->reactor = this;
    state_->response = response;
  }

  // `caller`: the authenticated task asking ("" insecure); `shm_reply`:
  // GrpcWorkerService::ShmReply, or null.
  void Start(Worker* worker, const grpc::ByteBuffer* raw_request, const std::string& caller,
             const GrpcWorkerService::ShmReply* shm_reply) {
    RecvTensorRequest request;
    grpc::Slice slice;
    if (!raw_request->DumpToSingleSlice(&slice).ok() ||
        !request.ParseFromArray(slice.begin(), static_cast<int>(slice.size()))) {
      state_->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "RecvTensorRequest does not parse"), nullptr);
      return;
    }
    // Through shared memory only to a caller that asked, under its own
    // authenticated name (never a name from the request).
    const uint64_t pull_id = request.shm_pull_id();
    const int64_t step_id = request.step_id();
    const bool via_shm = pull_id != 0 && shm_reply != nullptr && *shm_reply && !caller.empty();
    worker->RecvTensorAsync(&request, caller, [state = state_, via_shm, pull_id, step_id, caller, shm_reply](
                                          const absl::Status& s, const Tensor& value, bool is_dead) {
      if (!s.ok()) return state->Finish(ToGrpcStatus(s), nullptr);
      if (via_shm) {
        StatusCallback done = [state, value, is_dead](const absl::Status& sent) {
          // A ring that broke first: the tensor goes in the reply after all.
          grpc::ByteBuffer reply = sent.ok() ? EncodeInShmRecvTensorResponse() : EncodeRecvTensorResponse(value, is_dead);
          state->Finish(grpc::Status::OK, &reply);
        };
        if ((*shm_reply)(caller, step_id, pull_id, value, EncodeRecvTensorHeader(value, is_dead), done)) return;
      }
      grpc::ByteBuffer reply = EncodeRecvTensorResponse(value, is_dead);
      state->Finish(grpc::Status::OK, &reply);
    });
  }

  void OnCancel() override {
    state_->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "RecvTensor cancelled by the client"), nullptr);
  }
  void OnDone() override { delete this; }

 private:
  struct State {
    absl::Mutex mu;
    bool finished ABSL_GUARDED_BY(mu) = false;
    RecvTensorReactor* reactor = nullptr;  // valid until the first Finish
    grpc::ByteBuffer* response = nullptr;  // owned by gRPC, valid as long as reactor

    void Finish(const grpc::Status& status, grpc::ByteBuffer* reply) {
      {
        absl::MutexLock lock(&mu);
        if (finished) return;
        finished = true;
      }
      if (reply != nullptr) response->Swap(reply);
      reactor->Finish(status);
    }
  };
  std::shared_ptr<State> state_;
};

// Authorises the call with `check`, then hands it to `handler`; a refusal
// finishes it at once.
template <typename Request, typename Response>
grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* ctx, const PeerAuthenticator& auth, const char* what,
                                absl::Status (*check)(const Caller&, absl::string_view), Worker* worker,
                                const Request* request, Response* response,
                                void (Worker::*handler)(const Request*, Response*, StatusCallback)) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<Caller> caller =
      Authorize(auth, *ctx, what, [&](const Caller& c) { return check(c, what); });
  if (!caller.ok()) {
    reactor->Finish(ToGrpcStatus(caller.status()));
    return reactor;
  }
  (worker->*handler)(request, response, FinishWith(reactor));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* GrpcWorkerService::GetStatus(grpc::CallbackServerContext* ctx,
                                                       const GetStatusRequest* request, GetStatusResponse* response) {
  return Serve(ctx, auth_, "WorkerService.GetStatus", &RequireClusterMember, worker_, request, response, &Worker::GetStatusAsync);
}

grpc::ServerUnaryReactor* GrpcWorkerService::RegisterGraph(grpc::CallbackServerContext* ctx,
                                                           const RegisterGraphRequest* request,
                                                           RegisterGraphResponse* response) {
  return Serve(ctx, auth_, "WorkerService.RegisterGraph", &RequireMaster, worker_, request, response, &Worker::RegisterGraphAsync);
}

grpc::ServerUnaryReactor* GrpcWorkerService::DeregisterGraph(grpc::CallbackServerContext* ctx,
                                                             const DeregisterGraphRequest* request,
                                                             DeregisterGraphResponse* response) {
  return Serve(ctx, auth_, "WorkerService.DeregisterGraph", &RequireMaster, worker_, request, response, &Worker::DeregisterGraphAsync);
}

grpc::ServerUnaryReactor* GrpcWorkerService::RunGraph(grpc::CallbackServerContext* ctx,
                                                      const RunGraphRequest* request, RunGraphResponse* response) {
  return Serve(ctx, auth_, "WorkerService.RunGraph", &RequireMaster, worker_, request, response, &Worker::RunGraphAsync);
}

grpc::ServerUnaryReactor* GrpcWorkerService::RecvTensor(grpc::CallbackServerContext* ctx,
                                                        const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  absl::StatusOr<Caller> caller = Authorize(auth_, *ctx, "WorkerService.RecvTensor", [](const Caller& c) {
    return RequireClusterMember(c, "WorkerService.RecvTensor");
  });
  if (!caller.ok()) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(caller.status()));
    return reactor;
  }
  auto* reactor = new RecvTensorReactor(response);
  reactor->Start(worker_, request, caller->name, &shm_reply_);
  return reactor;
}

grpc::ServerUnaryReactor* GrpcWorkerService::AbortStep(grpc::CallbackServerContext* ctx,
                                                       const AbortStepRequest* request, AbortStepResponse* response) {
  return Serve(ctx, auth_, "WorkerService.AbortStep", &RequireMaster, worker_, request, response, &Worker::AbortStepAsync);
}

grpc::ServerUnaryReactor* GrpcWorkerService::CleanupStep(grpc::CallbackServerContext* ctx,
                                                         const CleanupStepRequest* request,
                                                         CleanupStepResponse* response) {
  return Serve(ctx, auth_, "WorkerService.CleanupStep", &RequireMaster, worker_, request, response, &Worker::CleanupStepAsync);
}

grpc::ServerUnaryReactor* GrpcWorkerService::PutDataset(grpc::CallbackServerContext* ctx,
                                                        const PutDatasetRequest* request,
                                                        PutDatasetResponse* response) {
  return Serve(ctx, auth_, "WorkerService.PutDataset", &RequireMaster, worker_, request, response,
               &Worker::PutDatasetAsync);
}

grpc::ServerUnaryReactor* GrpcWorkerService::GetStepState(grpc::CallbackServerContext* ctx,
                                                          const GetStepStateRequest* request,
                                                          GetStepStateResponse* response) {
  return Serve(ctx, auth_, "WorkerService.GetStepState", &RequireMaster, worker_, request, response,
               &Worker::GetStepStateAsync);
}

grpc::ServerUnaryReactor* GrpcWorkerService::ResetContainers(grpc::CallbackServerContext* ctx,
                                                             const ResetContainersRequest* request,
                                                             ResetContainersResponse* response) {
  return Serve(ctx, auth_, "WorkerService.ResetContainers", &RequireMaster, worker_, request, response,
               &Worker::ResetContainersAsync);
}

}  // namespace worker
}  // namespace weft
