// In-process adapters: the master's single-process mode and tests.
//
// LocalWorker presents a Worker core through WorkerInterface with no RPC, so
// the master drives an in-process task exactly as it drives a remote one.
// Errors are prefixed "task <name>: " as GrpcRemoteWorker's are. The RunGraph
// timeout is not enforced in process (the master aborts a stuck step with
// AbortStep).
//
// InProcessTensorPuller connects Workers living in one process: a pull calls
// the sending Worker's RecvTensorAsync directly, so the receiver gets the
// sender's buffer without a copy.
//
// Thread-safety: both are thread-safe.
#ifndef WEFT_WORKER_LOCAL_WORKER_H_
#define WEFT_WORKER_LOCAL_WORKER_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "worker/remote_rendezvous.h"
#include "worker/worker.h"
#include "worker/worker_interface.h"

namespace weft {
namespace worker {

class LocalWorker final : public WorkerInterface {
 public:
  // `worker` (borrowed) outlives this adapter.
  explicit LocalWorker(Worker* worker) : worker_(worker) {}

  const std::string& task() const override { return worker_->task(); }
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
  void PutDatasetAsync(const PutDatasetRequest* request, PutDatasetResponse* response, StatusCallback done) override;
  void ResetContainersAsync(const ResetContainersRequest* request, ResetContainersResponse* response,
                            StatusCallback done) override;

 private:
  StatusCallback Named(StatusCallback done) const;

  Worker* const worker_;
};

class InProcessTensorPuller final : public TensorPullerInterface {
 public:
  // Makes `worker` (borrowed) reachable by its task name. REQUIRES: the
  // worker outlives every pull from it; register before steps run.
  void AddWorker(Worker* worker);

  std::function<void()> PullAsync(const std::string& task, int64_t step_id, const std::string& key,
                                  Rendezvous::DoneCallback done) override;

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Worker*> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace worker
}  // namespace weft

#endif  // WEFT_WORKER_LOCAL_WORKER_H_
