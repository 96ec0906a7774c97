// How the master sees whether a job's tasks are alive.
//
// Every task reports an incarnation, random and fixed at its start
// (GetStatus); a different one means the task restarted and lost its state.
// ProbeTasks asks every task at once and gives up on those that have not
// answered within a timeout; FailedTasks compares the answers with the
// incarnations a session started with. A Heartbeat probes on a thread at an
// interval while a job runs and reports the first failed or draining task.
// WaitForTasks polls until every task answers again (restarted by Kubernetes
// or `weft local`), for recovery.
//
// Thread-safety: the functions are thread-safe; a Heartbeat's callbacks run
// on its thread.
#ifndef WEFT_MASTER_TASK_MONITOR_H_
#define WEFT_MASTER_TASK_MONITOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "master/worker_cache.h"

namespace weft {
namespace master {

struct TaskHealth {
  std::string task;
  bool answered = false;
  absl::Status error;        // why it did not answer
  uint64_t incarnation = 0;  // when it answered
  bool draining = false;     // it got SIGTERM and is about to stop
};

// Every task of `workers`, in ListTasks order, each given at most `timeout`.
std::vector<TaskHealth> ProbeTasks(WorkerCacheInterface* workers, absl::Duration timeout);

struct TaskFailure {
  std::string task;
  std::string reason;  // "unreachable: ...", "restarted (incarnation 1f.. -> 9a..)"
};

// The tasks of `probe` that did not answer or answer with an incarnation
// other than `known`'s (tasks missing from `known` are not judged).
std::vector<TaskFailure> FailedTasks(const std::vector<TaskHealth>& probe,
                                     const std::map<std::string, uint64_t>& known);

// Polls every `poll` until every task answers and none is draining; returns
// their incarnations. DEADLINE_EXCEEDED after `limit`, naming the tasks
// still missing and their last error; CANCELLED once `stop` (may be null)
// returns true.
absl::StatusOr<std::map<std::string, uint64_t>> WaitForTasks(WorkerCacheInterface* workers, absl::Duration limit,
                                                             const std::function<bool()>& stop,
                                                             absl::Duration poll = absl::Milliseconds(200));

// Polls like WaitForTasks until `task` answers with an incarnation other
// than `old_incarnation` (it restarted) and is not draining; returns the new
// incarnation. The same errors as WaitForTasks.
absl::StatusOr<uint64_t> WaitForRestart(WorkerCacheInterface* workers, const std::string& task,
                                        uint64_t old_incarnation, absl::Duration limit,
                                        const std::function<bool()>& stop,
                                        absl::Duration poll = absl::Milliseconds(200));

class Heartbeat {
 public:
  // Probes every `interval` (each probe waiting at most `timeout`) until
  // destroyed. `on_failure` runs once per failed task (until Update gives
  // the task's new incarnation); `on_draining` once per draining task.
  Heartbeat(WorkerCacheInterface* workers, std::map<std::string, uint64_t> known, absl::Duration interval,
            absl::Duration timeout, std::function<void(const TaskFailure&)> on_failure,
            std::function<void(const std::string& task)> on_draining);
  ~Heartbeat();  // stops and joins the thread
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // `task` came back as `incarnation` and the job goes on with it.
  void Update(const std::string& task, uint64_t incarnation);

 private:
  void Loop();

  WorkerCacheInterface* const workers_;
  absl::Mutex mu_;
  std::map<std::string, uint64_t> known_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> reported_ ABSL_GUARDED_BY(mu_);
  const absl::Duration interval_;
  const absl::Duration timeout_;
  const std::function<void(const TaskFailure&)> on_failure_;
  const std::function<void(const std::string&)> on_draining_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_TASK_MONITOR_H_
