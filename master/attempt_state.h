// What one attempt of a distributed job shares between its parts (the
// runner, the heartbeat's callbacks, the replicas' recovery and the
// checkpoint hook) and leaves behind for the recovery that may follow it.
//
// Thread-safety: the members under `mu` are written by the heartbeat's and
// the replicas' threads; the others are set by the attempt's thread before
// any replica runs, except reached_step and over (atomic) and saved_step
// and preempted, which only the training loop's thread touches.
#ifndef WEFT_MASTER_ATTEMPT_STATE_H_
#define WEFT_MASTER_ATTEMPT_STATE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "master/master_session.h"
#include "master/task_monitor.h"
#include "proto/master_service.pb.h"

namespace weft {
namespace master {

// Applies a change to the job's status and publishes it at once
// (JobRunnerOptions::update_status). May be null.
using StatusUpdater = std::function<void(const std::function<void(JobStatus*)>&)>;

struct AttemptState {
  absl::Mutex mu;
  std::map<std::string, uint64_t> incarnations ABSL_GUARDED_BY(mu);  // of its session's tasks
  std::optional<TaskFailure> heartbeat_failure ABSL_GUARDED_BY(mu);
  std::string draining ABSL_GUARDED_BY(mu);  // a task the heartbeat saw draining
  std::string drained ABSL_GUARDED_BY(mu);   // the one this attempt stopped for
  // Elastic jobs: why the membership should change at the next step
  // boundary (a worker to join, `weft scale`), and the change this attempt
  // stopped for.
  std::string regroup ABSL_GUARDED_BY(mu);
  std::string regrouped ABSL_GUARDED_BY(mu);
  std::vector<std::string> replica_tasks;    // set before any replica runs
  std::set<std::string> ps_tasks;            // tasks holding no replica
  MasterSession* session = nullptr;
  Heartbeat* heartbeat = nullptr;
  std::atomic<int64_t> reached_step{0};
  // The training loop returned: a replica waiting for its worker stops
  // waiting, so that the attempt ends without it.
  std::atomic<bool> over{false};
  int64_t saved_step = -1;  // the last checkpoint of this attempt
  bool preempted = false;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_ATTEMPT_STATE_H_
