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
// Worker tasks that register with the master (AddTask) join the cluster
// while it runs: ListTasks and cluster() are read anew on each call.
//
// Thread-safety: thread-safe.
#ifndef WEFT_MASTER_WORKER_CACHE_H_
#define WEFT_MASTER_WORKER_CACHE_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
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
  // Adds a worker task that registered itself (MasterService.RegisterWorker)
  // at `address`; true when it was not known there before. UNIMPLEMENTED
  // where the tasks are fixed.
  virtual absl::StatusOr<bool> AddTask(const std::string& task, const std::string& address);
  // Whether `task` is in the cluster at `address` (a worker saying again
  // that it is there needs no second check).
  virtual bool Knows(const std::string& task, const std::string& address) const { return false; }
  // A client for `task` at `address` that the cache does not keep: to ask a
  // task that registers who it is before AddTask. Null where the tasks are
  // fixed.
  virtual std::unique_ptr<WorkerInterface> NewClient(const std::string& task, const std::string& address);
};

// `cluster`'s tasks as they were at Freeze (until then, as they are): a job
// that is not elastic keeps the tasks it started with for its life, whatever
// registers after. `cluster` outlives the view.
class TaskSnapshot final : public WorkerCacheInterface {
 public:
  explicit TaskSnapshot(WorkerCacheInterface* cluster) : cluster_(cluster) {}
  void Freeze();
  std::vector<std::string> ListTasks() const override;
  WorkerInterface* GetOrCreateWorker(const std::string& task) override;
  ClusterDef cluster() const override { return cluster_->cluster(); }

 private:
  WorkerCacheInterface* const cluster_;
  mutable absl::Mutex mu_;
  std::optional<std::vector<std::string>> tasks_ ABSL_GUARDED_BY(mu_);
};

// The index of a worker task that joins ("/job:worker/task:3" -> 3);
// INVALID_ARGUMENT for anything else.
absl::StatusOr<int> JoiningWorkerIndex(const std::string& task);


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

  // At most this many tasks, registered ones included.
  static constexpr int kMaxTasks = 4096;

  std::vector<std::string> ListTasks() const override;
  WorkerInterface* GetOrCreateWorker(const std::string& task) override;
  // The cluster given to Create without its "master" job, with the workers
  // that registered since; empty for CreateLocal.
  ClusterDef cluster() const override;
  // A worker task ("/job:worker/task:N") joins at `address`, after the
  // workers of lower index. A task of Create's cluster keeps its address
  // (FAILED_PRECONDITION); a registered one may move (its old client stays
  // valid, unused); an address is one task's. INVALID_ARGUMENT for another
  // job or a bad address, RESOURCE_EXHAUSTED beyond kMaxTasks tasks or
  // kMaxTasks moves.
  absl::StatusOr<bool> AddTask(const std::string& task, const std::string& address) override;
  bool Knows(const std::string& task, const std::string& address) const override;
  std::unique_ptr<WorkerInterface> NewClient(const std::string& task, const std::string& address) override {
    return factory_(task, address);
  }

 private:
  WorkerCache(std::vector<std::string> tasks, std::map<std::string, std::string> addresses, ClusterDef cluster,
              WorkerFactory factory);

  const WorkerFactory factory_;
  const std::set<std::string> fixed_;  // Create's tasks
  mutable absl::Mutex mu_;
  std::vector<std::string> tasks_ ABSL_GUARDED_BY(mu_);
  ClusterDef cluster_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> addresses_ ABSL_GUARDED_BY(mu_);  // task -> host:port
  std::map<std::string, std::unique_ptr<WorkerInterface>> workers_ ABSL_GUARDED_BY(mu_);
  // Clients of registered tasks that moved: callers may still hold them.
  std::vector<std::unique_ptr<WorkerInterface>> moved_ ABSL_GUARDED_BY(mu_);
};

// `s` with its message prefixed "task <task>: ", unless a remote client
// already named the task that way.
absl::Status WithTask(const absl::Status& s, const std::string& task);

// Asking every task for its status and devices: master/cluster_probe.h.

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_WORKER_CACHE_H_
