// MemberWorkers: the tasks an elastic job trains on now, as a worker cache.
//
// An elastic job (JobSpec.elastic) plans, probes, heartbeats and
// checkpoints over its members only, so a worker that left for good is no
// longer asked for anything, and one standing by (the global batch would not
// split over it) is not in the job's collective group. The job runner hands
// this view to everything it starts and changes the membership between
// attempts. Every non-worker task (a ps, were there one) stays a member.
//
// Thread-safety: thread-safe; ListTasks reflects the latest SetWorkers.
#ifndef WEFT_MASTER_MEMBER_WORKERS_H_
#define WEFT_MASTER_MEMBER_WORKERS_H_

#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "master/worker_cache.h"

namespace weft {
namespace master {

class MemberWorkers final : public WorkerCacheInterface {
 public:
  // Every task of `cluster` is a member at first. `cluster` must outlive
  // the view.
  explicit MemberWorkers(WorkerCacheInterface* cluster);

  // The cluster's tasks in its order, less the workers that are not members.
  std::vector<std::string> ListTasks() const override;
  // Any task of the cluster: a caller names only tasks it listed.
  WorkerInterface* GetOrCreateWorker(const std::string& task) override { return cluster_->GetOrCreateWorker(task); }
  ClusterDef cluster() const override { return cluster_->cluster(); }

  // The worker tasks ("/job:worker/task:N") that are members from now on;
  // INVALID_ARGUMENT naming a task that is not a worker of the cluster.
  absl::Status SetWorkers(const std::set<std::string>& workers);
  // The member workers, in the cluster's order.
  std::vector<std::string> Workers() const;
  // Every worker of the cluster, members or not.
  std::vector<std::string> ClusterWorkers() const;
  // The whole cluster, to ask workers that are not members.
  WorkerCacheInterface* cluster_cache() const { return cluster_; }

 private:
  WorkerCacheInterface* const cluster_;
  mutable absl::Mutex mu_;
  std::set<std::string> workers_ ABSL_GUARDED_BY(mu_);
};

// Whether `task` is a worker task ("/job:worker/...").
bool IsWorkerTask(const std::string& task);

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_MEMBER_WORKERS_H_
