// The state of one JobManager job and of one watcher, shared by the files
// that implement the manager (job_manager.cc: the public calls;
// job_manager_runner.cc: the runner threads and status publication). Not
// for use outside the manager.
#ifndef WEFT_MASTER_JOB_MANAGER_INTERNAL_H_
#define WEFT_MASTER_JOB_MANAGER_INTERNAL_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "master/job_manager.h"
#include "master/job_runner.h"

namespace weft {
namespace master {

// One subscriber. `mu` is held while its callback runs, so unsubscribing
// waits for a delivery in progress and no delivery starts afterwards.
class JobManager::Watcher {
 public:
  explicit Watcher(std::function<void(const JobStatus&)> fn) : fn_(std::move(fn)) {}
  void Deliver(const JobStatus& s) {
    absl::MutexLock lock(&mu_);
    if (active_) fn_(s);
  }
  void Stop() {
    absl::MutexLock lock(&mu_);
    active_ = false;
  }
  absl::Mutex* mu() { return &mu_; }
  // REQUIRES: mu() held.
  void DeliverLocked(const JobStatus& s) { fn_(s); }

 private:
  absl::Mutex mu_;
  bool active_ = true;
  const std::function<void(const JobStatus&)> fn_;
};

struct JobManager::Job {
  Job(std::string id, JobSpec spec) : id(std::move(id)), spec(std::move(spec)) {}

  const std::string id;
  const JobSpec spec;
  std::unique_ptr<JobRunner> runner;  // null for jobs that will not run

  mutable absl::Mutex mu;
  JobStatus status ABSL_GUARDED_BY(mu);
  absl::Time last_publish ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  absl::Time last_persist ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  // The terminal status has been delivered to the watchers and stored.
  bool finished ABSL_GUARDED_BY(mu) = false;
  std::vector<std::shared_ptr<Watcher>> watchers ABSL_GUARDED_BY(mu);
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_JOB_MANAGER_INTERNAL_H_
