#include "master/recovery_policy.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace weft {
namespace master {

absl::StatusOr<std::optional<ps::CheckpointEntry>> ChooseResumePoint(const JobSpec& job,
                                                                     absl::StatusOr<ps::CheckpointEntry> found,
                                                                     bool at_start) {
  if (found.ok()) return std::optional<ps::CheckpointEntry>(*std::move(found));
  if (!absl::IsNotFound(found.status())) return found.status();
  if (at_start && !job.checkpoint().resume_from().empty()) {
    return absl::FailedPreconditionError(absl::StrCat("job '", job.name(), "': resume_from ",
                                                      job.checkpoint().resume_from(),
                                                      " holds no valid checkpoint: ", found.status().message()));
  }
  return std::optional<ps::CheckpointEntry>();
}

absl::StatusOr<std::optional<ps::CheckpointEntry>> FindResumePoint(const JobSpec& job, Checkpointer* checkpointer,
                                                                   bool at_start) {
  if (!checkpointer->enabled()) return std::optional<ps::CheckpointEntry>();
  return ChooseResumePoint(job, checkpointer->FindResumePoint(), at_start);
}

std::optional<TaskFailure> BlameTask(const std::string& drained, const std::map<std::string, uint64_t>& incarnations,
                                     const std::vector<TaskHealth>& probe,
                                     const std::optional<TaskFailure>& heartbeat_failure) {
  if (!drained.empty()) return TaskFailure{drained, "is stopping after SIGTERM (checkpointed first)"};
  std::vector<TaskFailure> failed = FailedTasks(probe, incarnations);
  if (incarnations.empty()) {  // the attempt did not get as far as a session
    for (const TaskHealth& h : probe) {
      if (!h.answered) failed.push_back({h.task, absl::StrCat("unreachable: ", h.error.message())});
    }
  }
  if (!failed.empty()) return failed[0];
  return heartbeat_failure;
}

absl::Status CheckRestartBudget(const TaskFailure& failure, int restarts, int max_restarts,
                                const absl::Status& error) {
  if (restarts < max_restarts) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("task ", failure.task, " ", failure.reason, "; the job gave up after ",
                                             restarts, " recoveries (recovery.max_restarts): ", error.message()));
}

ReplicaFailure ClassifyReplicaFailure(const absl::Status& error, const std::string& task,
                                      const std::vector<TaskFailure>& failed, const std::set<std::string>& ps_tasks,
                                      const std::optional<TaskFailure>& heartbeat_failure) {
  if (failed.empty()) {
    // The heartbeat aborted the step for a worker that is back already, or
    // the error is the job's own.
    const bool aborted_for_a_worker = heartbeat_failure.has_value() && ps_tasks.count(heartbeat_failure->task) == 0 &&
                                      absl::IsUnavailable(error);
    return aborted_for_a_worker ? ReplicaFailure::kGoOn : ReplicaFailure::kEndJob;
  }
  bool mine = false;
  for (const TaskFailure& f : failed) {
    if (ps_tasks.count(f.task) > 0) return ReplicaFailure::kEndJob;  // the variables' owner: a full recovery
    mine = mine || f.task == task;
  }
  return mine ? ReplicaFailure::kAwaitOwnWorker : ReplicaFailure::kGoOn;
}

}  // namespace master
}  // namespace weft
