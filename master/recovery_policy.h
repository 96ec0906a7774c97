// The recovery policy of a distributed job (docs/fault_tolerance.md), apart
// from the runner so that each decision can be checked on its own: the
// job's recovery settings, where a job (re)starts, which task a failed
// attempt is blamed on, how many recoveries it may make, and what an async
// PARAMETER_SERVER replica does when its step fails.
//
// Thread-safety: pure functions, except FindResumePoint, which reads the
// checkpoint directory through the Checkpointer (see its contract).
#ifndef WEFT_MASTER_RECOVERY_POLICY_H_
#define WEFT_MASTER_RECOVERY_POLICY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "job/defaults.h"
#include "master/checkpointer.h"
#include "master/task_monitor.h"
#include "proto/job.pb.h"
#include "ps/checkpoint_index.h"

namespace weft {
namespace master {

// The job's recovery.* settings with their defaults filled in are
// job/defaults.h's RecoverySettings (EffectiveRecovery).

// Where a job starts, given what Checkpointer::FindResumePoint found: that
// checkpoint; nullopt (step 0) when there is none, except that a job that
// names checkpoint.resume_from must find one there at its start
// (FAILED_PRECONDITION); any other error as it is. A recovery
// (`at_start` false) may start over from step 0.
absl::StatusOr<std::optional<ps::CheckpointEntry>> ChooseResumePoint(const JobSpec& job,
                                                                     absl::StatusOr<ps::CheckpointEntry> found,
                                                                     bool at_start);

// The search both a job's start and each recovery make: nullopt when the
// job keeps no checkpoints, else ChooseResumePoint over what `checkpointer`
// finds now.
absl::StatusOr<std::optional<ps::CheckpointEntry>> FindResumePoint(const JobSpec& job, Checkpointer* checkpointer,
                                                                   bool at_start);

// The task to blame for a failed attempt, or nullopt when no task failed
// and the error is the job's own: the task that drained after SIGTERM
// (`drained`, checkpointed first); else the first task of `probe` that
// failed against the attempt's `incarnations`, or, for an attempt that never
// got as far as a session (no incarnations), the first that did not answer;
// else what the heartbeat saw during the attempt.
std::optional<TaskFailure> BlameTask(const std::string& drained, const std::map<std::string, uint64_t>& incarnations,
                                     const std::vector<TaskHealth>& probe,
                                     const std::optional<TaskFailure>& heartbeat_failure);

// OK while `failure` may be recovered from: fewer than `max_restarts`
// recoveries so far. Else the error that ends the job: UNAVAILABLE naming
// the task, why, the recoveries made and the attempt's `error`.
absl::Status CheckRestartBudget(const TaskFailure& failure, int restarts, int max_restarts,
                                const absl::Status& error);

// What an async PARAMETER_SERVER replica does after its step on `task`
// failed with `error`, given the tasks a probe found failed (`failed`), the
// tasks that hold the variables (`ps_tasks`) and the heartbeat's failure of
// this attempt.
enum class ReplicaFailure {
  kEndJob,         // the job's own error, or a ps lost: the attempt ends
  kGoOn,           // another replica's worker failed: this one trains on
  kAwaitOwnWorker  // its own worker failed: wait for it to come back
};
ReplicaFailure ClassifyReplicaFailure(const absl::Status& error, const std::string& task,
                                      const std::vector<TaskFailure>& failed, const std::set<std::string>& ps_tasks,
                                      const std::optional<TaskFailure>& heartbeat_failure);

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_RECOVERY_POLICY_H_
