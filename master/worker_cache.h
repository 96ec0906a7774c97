// WorkerCache: the master's view of the tasks it drives.
//
// WorkerCacheInterface lists the cluster's tasks ("/job:worker/task:0") and
// hands out one WorkerInterface per task. The master reaches tasks only
// through it, so tests inject fakes or in-process workers and the daemon
// injects gRPC clients (GrpcRemoteWorker) through the factory.
//
// WorkerCache is the implementation over a ClusterDef: every job except
// "master" contributes its tasks, in the ClusterDef's job order and by task
// index within a job. Workers are made by the factory on first use and owned
// by the cache; a pointer it returns stays valid for the cache's lifetime.
//
// Thread-safety: thread-safe.
#ifndef WEFT_MASTER_WORKER_CACHE_H_
#define WEFT_MASTER_WORKER_CACHE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/cluster.pb.h"
#include "worker/worker_interface.h"

namespace weft {
namespace master {

class WorkerCacheInterface {
 public:
  virtual ~WorkerCacheInterface() = default;
  // Every task, in preference order (placement picks the first compatible
  // device of the first task that has one).
  virtual std::vector<std::string> ListTasks() const = 0;
  // The worker for `task`, or nullptr when the cluster has no such task.
  // Owned by the cache; valid for its lifetime.
  virtual WorkerInterface* GetOrCreateWorker(const std::string& task) = 0;
  // Every task's address, which the master sends with each RegisterGraph so
  // that the tasks reach one another where the master reaches them. Empty
  // when the tasks have no addresses (in process, fakes): nothing is sent.
  virtual ClusterDef cluster() const { return ClusterDef(); }
};

// Makes the client for `task` ("/job:ps/task:0") listening at `address`
// ("host:port"; empty for in-process tasks).
using WorkerFactory =
    std::function<std::unique_ptr<WorkerInterface>(const std::string& task, const std::string& address)>;

class WorkerCache final : public WorkerCacheInterface {
 public:
  // INVALID_ARGUMENT for a job without a name or tasks, a repeated job, or a
  // task with an empty address; REQUIRES: factory is set.
  static absl::StatusOr<std::unique_ptr<WorkerCache>> Create(const ClusterDef& cluster, WorkerFactory factory);
  // In-process tasks: `tasks` are task names, each with an empty address.
  static absl::StatusOr<std::unique_ptr<WorkerCache>> CreateLocal(const std::vector<std::string>& tasks,
                                                                  WorkerFactory factory);

  std::vector<std::string> ListTasks() const override { return tasks_; }
  WorkerInterface* GetOrCreateWorker(const std::string& task) override;
  // The cluster given to Create without its "master" job; empty for
  // CreateLocal.
  ClusterDef cluster() const override { return cluster_; }

 private:
  WorkerCache(std::vector<std::string> tasks, std::map<std::string, std::string> addresses, ClusterDef cluster,
              WorkerFactory factory);

  const std::vector<std::string> tasks_;
  const ClusterDef cluster_;
  const std::map<std::string, std::string> addresses_;  // task -> host:port
  const WorkerFactory factory_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<WorkerInterface>> workers_ ABSL_GUARDED_BY(mu_);
};

// `s` with its message prefixed "task <task>: ", unless a remote client
// already named the task that way.
absl::Status WithTask(const absl::Status& s, const std::string& task);

// Asking every task for its status and devices: master/cluster_probe.h.

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_WORKER_CACHE_H_
