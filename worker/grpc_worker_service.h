// GrpcWorkerService: WorkerService over gRPC's callback API, a thin adapter
// onto the Worker core.
//
// Each method hands its request to the Worker and returns the reactor at
// once; the Worker's callback finishes it, from whatever thread completes the
// work, so no reaction ever blocks. RecvTensor is a raw method: its reply is
// the ByteBuffer of worker/grpc_tensor_coding.h whose payload slice points into the
// sender's tensor buffer. A RecvTensor whose client goes away is finished
// with CANCELLED at once; the value, when it comes, is dropped.
//
// Who may call: every method serves cluster members only (the master and
// tasks, by their certificates); RegisterGraph, DeregisterGraph, RunGraph,
// AbortStep, CleanupStep, GetStepState, ResetContainers and PutDataset serve only the
// master. Refusals are UNAUTHENTICATED or PERMISSION_DENIED (common/caller.h)
// and logged.
//
// Thread-safety: thread-safe; `worker` (borrowed) outlives the service and
// the server it is registered with.
#ifndef WEFT_WORKER_GRPC_WORKER_SERVICE_H_
#define WEFT_WORKER_GRPC_WORKER_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/grpc_security.h"
#include "common/tensor.h"
#include "proto/worker_service.grpc.pb.h"
#include "worker/worker.h"

namespace weft {
namespace worker {

using GrpcWorkerServiceBase = WorkerService::WithCallbackMethod_GetStatus<
    WorkerService::WithCallbackMethod_RegisterGraph<WorkerService::WithCallbackMethod_DeregisterGraph<
        WorkerService::WithCallbackMethod_RunGraph<WorkerService::WithRawCallbackMethod_RecvTensor<
            WorkerService::WithCallbackMethod_AbortStep<WorkerService::WithCallbackMethod_CleanupStep<
                WorkerService::WithCallbackMethod_GetStepState<
                    WorkerService::WithCallbackMethod_ResetContainers<WorkerService::Service>>>>>>>>>;

// PutDataset, mixed in on its own line.
using GrpcWorkerServiceWithDatasets = WorkerService::WithCallbackMethod_PutDataset<GrpcWorkerServiceBase>;

class GrpcWorkerService final : public GrpcWorkerServiceWithDatasets {
 public:
  // `security` null: insecure (every caller may do everything).
  explicit GrpcWorkerService(Worker* worker, std::shared_ptr<const TransportSecurity> security = nullptr)
      : worker_(worker), auth_(std::move(security)) {}

  // Sends a RecvTensor reply through shared memory when the caller asked
  // for it (shm_pull_id) and has a ring from this task: the arguments of
  // collective::WorkerCollectives::SendTensorThroughRing. Unset (the
  // default), or returning false: the reply goes over gRPC. Set it before
  // the server starts.
  using ShmReply = std::function<bool(const std::string& task, int64_t step_id, uint64_t pull_id,
                                      const Tensor& value, std::string header, StatusCallback& done)>;
  void SetShmReply(ShmReply reply) { shm_reply_ = std::move(reply); }

  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx, const GetStatusRequest* request,
                                      GetStatusResponse* response) override;
  grpc::ServerUnaryReactor* RegisterGraph(grpc::CallbackServerContext* ctx, const RegisterGraphRequest* request,
                                          RegisterGraphResponse* response) override;
  grpc::ServerUnaryReactor* DeregisterGraph(grpc::CallbackServerContext* ctx, const DeregisterGraphRequest* request,
                                            DeregisterGraphResponse* response) override;
  grpc::ServerUnaryReactor* RunGraph(grpc::CallbackServerContext* ctx, const RunGraphRequest* request,
                                     RunGraphResponse* response) override;
  grpc::ServerUnaryReactor* RecvTensor(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* AbortStep(grpc::CallbackServerContext* ctx, const AbortStepRequest* request,
                                      AbortStepResponse* response) override;
  grpc::ServerUnaryReactor* CleanupStep(grpc::CallbackServerContext* ctx, const CleanupStepRequest* request,
                                        CleanupStepResponse* response) override;
  grpc::ServerUnaryReactor* GetStepState(grpc::CallbackServerContext* ctx, const GetStepStateRequest* request,
                                         GetStepStateResponse* response) override;
  grpc::ServerUnaryReactor* ResetContainers(grpc::CallbackServerContext* ctx, const ResetContainersRequest* request,
                                            ResetContainersResponse* response) override;

  // Master only: an uploaded dataset's chunk (worker/dataset_cache.h).
  grpc::ServerUnaryReactor* PutDataset(grpc::CallbackServerContext* ctx, const PutDatasetRequest* request,
                                       PutDatasetResponse* response) override;

 private:
  ShmReply shm_reply_;
  Worker* const worker_;
  const PeerAuthenticator auth_;
};

}  // namespace worker
}  // namespace weft

#endif  // WEFT_WORKER_GRPC_WORKER_SERVICE_H_
