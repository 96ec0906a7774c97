// InProcessCluster: every task of a cluster as a worker::Worker in this
// process, pulling tensors from each other directly (InProcessTensorPuller)
// and reached by the master through LocalWorker adapters. The master drives
// it exactly as it drives remote tasks: for tests, and for running a job
// with every task in one process.
//
// Thread-safety: thread-safe after Create. The destructor shuts the workers
// down; the master using workers() must be gone by then.
#ifndef WEFT_MASTER_IN_PROCESS_CLUSTER_H_
#define WEFT_MASTER_IN_PROCESS_CLUSTER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "master/worker_cache.h"
#include "worker/local_worker.h"
#include "worker/worker.h"

namespace weft {
namespace master {

class InProcessCluster {
 public:
  // `tasks`: task names ("/job:ps/task:0"); `options` applies to every
  // worker (job, task_index and puller are set per task).
  static absl::StatusOr<std::unique_ptr<InProcessCluster>> Create(const std::vector<std::string>& tasks,
                                                                  const worker::WorkerOptions& options = {});
  ~InProcessCluster();
  InProcessCluster(const InProcessCluster&) = delete;
  InProcessCluster& operator=(const InProcessCluster&) = delete;

  WorkerCacheInterface* workers() { return cache_.get(); }
  // nullptr for an unknown task.
  worker::Worker* worker(const std::string& task);

 private:
  InProcessCluster() = default;

  // Declaration order is destruction order, reversed: the workers borrow
  // the puller, the cache's adapters borrow the workers.
  worker::InProcessTensorPuller puller_;
  std::map<std::string, std::unique_ptr<worker::Worker>> workers_;
  std::unique_ptr<WorkerCache> cache_;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_IN_PROCESS_CLUSTER_H_
