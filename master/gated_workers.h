// GatedWorkers: a test WorkerCacheInterface that forwards to another one but
// holds every GetStatus until Open() — so a test can act (subscribe to a
// job, say) while a job or session is known to be starting. Test-only.
//
// Thread-safety: thread-safe.
#ifndef WEFT_MASTER_GATED_WORKERS_H_
#define WEFT_MASTER_GATED_WORKERS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "master/worker_cache.h"

namespace weft {
namespace master {

class GatedWorkers final : public WorkerCacheInterface {
 public:
  // `inner` must outlive this cache.
  explicit GatedWorkers(WorkerCacheInterface* inner) : inner_(inner) {}

  void Open() { gate_.Notify(); }

  std::vector<std::string> ListTasks() const override { return inner_->ListTasks(); }
  ClusterDef cluster() const override { return inner_->cluster(); }
  WorkerInterface* GetOrCreateWorker(const std::string& task) override {
    WorkerInterface* w = inner_->GetOrCreateWorker(task);
    if (w == nullptr) return nullptr;
    absl::MutexLock lock(&mu_);
    std::unique_ptr<Gated>& g = gated_[task];
    if (g == nullptr) g = std::make_unique<Gated>(w, &gate_);
    return g.get();
  }

 private:
  class Gated final : public WorkerInterface {
   public:
    Gated(WorkerInterface* w, absl::Notification* gate) : w_(w), gate_(gate) {}
    const std::string& task() const override { return w_->task(); }
    void GetStatusAsync(const GetStatusRequest* q, GetStatusResponse* r, StatusCallback done) override {
      gate_->WaitForNotification();
      w_->GetStatusAsync(q, r, std::move(done));
    }
    void RegisterGraphAsync(const RegisterGraphRequest* q, RegisterGraphResponse* r, StatusCallback done) override {
      w_->RegisterGraphAsync(q, r, std::move(done));
    }
    void DeregisterGraphAsync(const DeregisterGraphRequest* q, DeregisterGraphResponse* r,
                              StatusCallback done) override {
      w_->DeregisterGraphAsync(q, r, std::move(done));
    }
    void RunGraphAsync(const RunGraphRequest* q, RunGraphResponse* r, absl::Duration t, StatusCallback done) override {
      w_->RunGraphAsync(q, r, t, std::move(done));
    }
    void AbortStepAsync(const AbortStepRequest* q, AbortStepResponse* r, StatusCallback done) override {
      w_->AbortStepAsync(q, r, std::move(done));
    }
    void CleanupStepAsync(const CleanupStepRequest* q, CleanupStepResponse* r, StatusCallback done) override {
      w_->CleanupStepAsync(q, r, std::move(done));
    }
    void ResetContainersAsync(const ResetContainersRequest* q, ResetContainersResponse* r,
                              StatusCallback done) override {
      w_->ResetContainersAsync(q, r, std::move(done));
    }

   private:
    WorkerInterface* const w_;
    absl::Notification* const gate_;
  };

  WorkerCacheInterface* const inner_;
  absl::Notification gate_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Gated>> gated_ ABSL_GUARDED_BY(mu_);
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_GATED_WORKERS_H_
