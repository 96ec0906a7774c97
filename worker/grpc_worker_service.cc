#include "worker/grpc_worker_service.h"

#include <memory>

#include "absl/synchronization/mutex.h"
#include "common/grpc_util.h"
#include "worker/tensor_coding.h"

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

  void Start(Worker* worker, const grpc::ByteBuffer* raw_request) {
    RecvTensorRequest request;
    grpc::Slice slice;
    if (!raw_request->DumpToSingleSlice(&slice).ok() ||
        !request.ParseFromArray(slice.begin(), static_cast<int>(slice.size()))) {
      state_->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "RecvTensorRequest does not parse"), nullptr);
      return;
    }
    worker->RecvTensorAsync(&request, [state = state_](const absl::Status& s, const Tensor& value, bool is_dead) {
      if (!s.ok()) return state->Finish(ToGrpcStatus(s), nullptr);
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

}  // namespace

grpc::ServerUnaryReactor* GrpcWorkerService::GetStatus(grpc::CallbackServerContext* ctx,
                                                       const GetStatusRequest* request, GetStatusResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  worker_->GetStatusAsync(request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* GrpcWorkerService::RegisterGraph(grpc::CallbackServerContext* ctx,
                                                           const RegisterGraphRequest* request,
                                                           RegisterGraphResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  worker_->RegisterGraphAsync(request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* GrpcWorkerService::DeregisterGraph(grpc::CallbackServerContext* ctx,
                                                             const DeregisterGraphRequest* request,
                                                             DeregisterGraphResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  worker_->DeregisterGraphAsync(request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* GrpcWorkerService::RunGraph(grpc::CallbackServerContext* ctx,
                                                      const RunGraphRequest* request, RunGraphResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  worker_->RunGraphAsync(request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* GrpcWorkerService::RecvTensor(grpc::CallbackServerContext*,
                                                        const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  auto* reactor = new RecvTensorReactor(response);
  reactor->Start(worker_, request);
  return reactor;
}

grpc::ServerUnaryReactor* GrpcWorkerService::AbortStep(grpc::CallbackServerContext* ctx,
                                                       const AbortStepRequest* request, AbortStepResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  worker_->AbortStepAsync(request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* GrpcWorkerService::CleanupStep(grpc::CallbackServerContext* ctx,
                                                         const CleanupStepRequest* request,
                                                         CleanupStepResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  worker_->CleanupStepAsync(request, response, FinishWith(reactor));
  return reactor;
}

}  // namespace worker
}  // namespace weft
