#include "worker/local_worker.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace weft {
namespace worker {

StatusCallback LocalWorker::Named(StatusCallback done) const {
  return [task = worker_->task(), done = std::move(done)](const absl::Status& s) {
    done(Annotate(s, absl::StrCat("task ", task)));
  };
}

void LocalWorker::GetStatusAsync(const GetStatusRequest* request, GetStatusResponse* response, StatusCallback done) {
  worker_->GetStatusAsync(request, response, Named(std::move(done)));
}

void LocalWorker::RegisterGraphAsync(const RegisterGraphRequest* request, RegisterGraphResponse* response,
                                     StatusCallback done) {
  worker_->RegisterGraphAsync(request, response, Named(std::move(done)));
}

void LocalWorker::DeregisterGraphAsync(const DeregisterGraphRequest* request, DeregisterGraphResponse* response,
                                       StatusCallback done) {
  worker_->DeregisterGraphAsync(request, response, Named(std::move(done)));
}

void LocalWorker::RunGraphAsync(const RunGraphRequest* request, RunGraphResponse* response, absl::Duration,
                                StatusCallback done) {
  worker_->RunGraphAsync(request, response, Named(std::move(done)));
}

void LocalWorker::AbortStepAsync(const AbortStepRequest* request, AbortStepResponse* response, StatusCallback done) {
  worker_->AbortStepAsync(request, response, Named(std::move(done)));
}

void LocalWorker::CleanupStepAsync(const CleanupStepRequest* request, CleanupStepResponse* response,
                                   StatusCallback done) {
  worker_->CleanupStepAsync(request, response, Named(std::move(done)));
}

void LocalWorker::GetStepStateAsync(const GetStepStateRequest* request, GetStepStateResponse* response,
                                    absl::Duration, StatusCallback done) {
  worker_->GetStepStateAsync(request, response, Named(std::move(done)));
}

void LocalWorker::ResetContainersAsync(const ResetContainersRequest* request, ResetContainersResponse* response,
                                       StatusCallback done) {
  worker_->ResetContainersAsync(request, response, Named(std::move(done)));
}

void LocalWorker::PutDatasetAsync(const PutDatasetRequest* request, PutDatasetResponse* response,
                                  StatusCallback done) {
  worker_->PutDatasetAsync(request, response, Named(std::move(done)));
}

void InProcessTensorPuller::AddWorker(Worker* worker) {
  absl::MutexLock lock(&mu_);
  workers_[worker->task()] = worker;
}

std::function<void()> InProcessTensorPuller::PullAsync(const std::string& task, int64_t step_id,
                                                       const std::string& key, Rendezvous::DoneCallback done) {
  Worker* worker = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(task);
    if (it != workers_.end()) worker = it->second;
  }
  if (worker == nullptr) {
    done(absl::UnavailableError(absl::StrCat("task ", task, " is not in this process")), Tensor(), false);
    return nullptr;
  }
  RecvTensorRequest request;
  request.set_step_id(step_id);
  request.set_rendezvous_key(key);
  worker->RecvTensorAsync(&request, /*caller=*/"", std::move(done));
  // Nothing to cancel: the sender's table fails the wait when its step ends,
  // and the receiving rendezvous ignores a late answer after an abort.
  return nullptr;
}

}  // namespace worker
}  // namespace weft
