// JobRunner's recovery (master/job_runner.h): where a distributed job
// starts, what it does between attempts, and an async PARAMETER_SERVER
// replica's recovery while the others train on. The decisions themselves
// are master/recovery_policy.h; this file carries them out.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "job/defaults.h"
#include "master/job_runner.h"
#include "master/recovery_policy.h"
#include "master/task_monitor.h"

namespace weft {
namespace master {

absl::StatusOr<std::optional<ps::CheckpointEntry>> JobRunner::StartingPoint(Checkpointer* checkpointer) {
  ASSIGN_OR_RETURN(std::optional<ps::CheckpointEntry> resume, FindResumePoint(job_, checkpointer, /*at_start=*/true));
  if (resume.has_value()) {
    UpdateStatus([&](JobStatus* s) {
      s->set_checkpoint_step(resume->step);
      s->set_checkpoint_path(resume->path);
    });
  }
  if (options_.resumed) {
    // The tasks may have lost their state with the old master, or be
    // restarting themselves.
    auto stop_waiting = [this] { return cancelled_.load() || preempted_.load(); };
    const RecoverySettings recovery = EffectiveRecovery(job_);
    absl::StatusOr<std::map<std::string, uint64_t>> back = WaitForTasks(workers_, recovery.task_wait, stop_waiting);
    if (!back.ok() && !stop_waiting()) return back.status();
    // The steps the previous master had reached (as last stored) and that
    // are trained again from the checkpoint.
    const int64_t lost = std::max<int64_t>(0, options_.reached_step - (resume.has_value() ? resume->step : 0));
    UpdateStatus([&](JobStatus* s) { s->set_steps_lost(s->steps_lost() + lost); });
  }
  return resume;
}

absl::StatusOr<std::optional<TrainResult>> JobRunner::Recover(const absl::Status& error, AttemptState* a,
                                                              int* restarts, Checkpointer* checkpointer,
                                                              std::optional<ps::CheckpointEntry>* resume) {
  const RecoverySettings recovery = EffectiveRecovery(job_);
  if (members_ != nullptr) {
    // An elastic job that stopped between steps to change its members.
    std::string regrouped;
    {
      absl::MutexLock lock(&a->mu);
      regrouped = a->regrouped;
    }
    if (!regrouped.empty()) {
      ASSIGN_OR_RETURN(const bool from_memory, RecoverMembers(regrouped, absl::Now(), /*wait=*/false, a));
      if (from_memory) {
        *resume = std::nullopt;
        return std::optional<TrainResult>();
      }
      return error;
    }
  }
  // A task failure, or an error of the job itself?
  // What the attempt saw, copied out first: the probe waits on the tasks,
  // which must not happen under a lock that their callbacks take.
  std::string drained;
  std::map<std::string, uint64_t> incarnations;
  std::optional<TaskFailure> heartbeat_failure;
  {
    absl::MutexLock lock(&a->mu);
    drained = a->drained;
    incarnations = a->incarnations;
    heartbeat_failure = a->heartbeat_failure;
  }
  std::vector<TaskHealth> probe;
  if (drained.empty()) probe = ProbeTasks(workers_, recovery.heartbeat_timeout);
  std::optional<TaskFailure> blamed = BlameTask(drained, incarnations, probe, heartbeat_failure);
  if (!blamed.has_value()) return error;
  const TaskFailure failure = *std::move(blamed);
  RETURN_IF_ERROR(CheckRestartBudget(failure, *restarts, recovery.max_restarts, error));
  ++*restarts;
  auto log = Logger("master");
  const absl::Time failed_at = absl::Now();
  log->warn("job '{}': task {} {}; recovering (restart {}): {}", job_.name(), failure.task, failure.reason, *restarts,
            error.ToString());
  UpdateStatus([&](JobStatus* s) {
    s->set_state(RECOVERING);
    s->set_restarts(s->restarts() + 1);
    s->set_failed_task(failure.task);
    s->set_failure(absl::StrCat(failure.reason, " (", error.ToString(), ")"));
    s->set_failure_time_unix_ms(absl::ToUnixMillis(failed_at));
  });
  if (members_ != nullptr) {
    ASSIGN_OR_RETURN(const bool from_memory,
                     RecoverMembers(absl::StrCat("task ", failure.task, " ", failure.reason), failed_at,
                                    /*wait=*/true, a));
    if (from_memory) {
      *resume = std::nullopt;
      return std::optional<TrainResult>();
    }
  }
  auto stop_waiting = [this] { return cancelled_.load() || preempted_.load(); };
  absl::StatusOr<std::map<std::string, uint64_t>> back = WaitForTasks(workers_, recovery.task_wait, stop_waiting);
  if (!back.ok()) {
    if (cancelled_.load()) return std::optional<TrainResult>();  // the next attempt ends CANCELLED first
    if (preempted_.load()) return std::optional<TrainResult>(Preempted(a->reached_step.load()));
    return absl::UnavailableError(absl::StrCat("task ", failure.task, " ", failure.reason,
                                               " and did not come back (recovery.task_wait_seconds): ",
                                               back.status().message()));
  }
  ASSIGN_OR_RETURN(*resume, FindResumePoint(job_, checkpointer, /*at_start=*/false));
  const int64_t from = resume->has_value() ? (*resume)->step : 0;
  const int64_t lost = std::max<int64_t>(0, a->reached_step.load() - from);
  log->info("job '{}': every task answers again after {:.1f} s; resuming at step {} ({} step(s) to train again)",
            job_.name(), absl::ToDoubleSeconds(absl::Now() - failed_at), from, lost);
  UpdateStatus([&](JobStatus* s) {
    s->set_steps_lost(s->steps_lost() + lost);  // the total may predate this master
    s->set_recovery_seconds(absl::ToDoubleSeconds(absl::Now() - failed_at));
  });
  return std::optional<TrainResult>();
}

bool JobRunner::RecoverReplica(const absl::Status& error, const std::string& task, AttemptState* a) {
  if (cancelled_.load() || preempted_.load()) return false;
  std::map<std::string, uint64_t> known;
  {
    absl::MutexLock lock(&a->mu);
    known = a->incarnations;
  }
  const RecoverySettings recovery = EffectiveRecovery(job_);
  std::vector<TaskFailure> failed = FailedTasks(ProbeTasks(workers_, recovery.heartbeat_timeout), known);
  std::optional<TaskFailure> heartbeat_failure;
  {
    absl::MutexLock lock(&a->mu);
    heartbeat_failure = a->heartbeat_failure;
  }
  switch (ClassifyReplicaFailure(error, task, failed, a->ps_tasks, heartbeat_failure)) {
    case ReplicaFailure::kEndJob:
      return false;
    case ReplicaFailure::kGoOn:
      return true;
    case ReplicaFailure::kAwaitOwnWorker:
      break;
  }
  auto log = Logger("master");
  const absl::Time failed_at = absl::Now();
  const int64_t failed_step = a->reached_step.load();
  std::string reason = "failed";
  for (const TaskFailure& f : failed) {
    if (f.task == task) reason = f.reason;
  }
  const bool elastic = members_ != nullptr;
  const absl::Duration wait = elastic ? ElasticWait(job_) : recovery.task_wait;
  log->warn("job '{}': worker {} {}; the other replicas train on while it comes back (up to {:.0f} s)", job_.name(),
            task, reason, absl::ToDoubleSeconds(wait));
  UpdateStatus([&](JobStatus* s) {
    s->set_restarts(s->restarts() + 1);
    s->set_failed_task(task);
    s->set_failure(absl::StrCat(reason, " (", error.ToString(), "); no step lost: the other replicas trained on"));
    s->set_failure_time_unix_ms(absl::ToUnixMillis(failed_at));
  });
  auto stop_waiting = [this, a] { return cancelled_.load() || preempted_.load() || a->over.load(); };
  absl::StatusOr<uint64_t> back = absl::DeadlineExceededError("elastic.wait_seconds: -1");
  if (wait > absl::ZeroDuration()) back = WaitForRestart(workers_, task, known[task], wait, stop_waiting);
  if (!back.ok()) {
    if (elastic && !stop_waiting()) {
      // The others go on without it from the next attempt; the wait is spent.
      const std::string why =
          absl::StrCat("task ", task, " ", reason, " and was not back within elastic.wait_seconds (",
                       absl::ToDoubleSeconds(wait), " s), in which the other replicas trained ",
                       a->reached_step.load() - failed_step, " step(s)");
      absl::MutexLock lock(&a->mu);
      if (a->regrouped.empty()) a->regrouped = why;
    }
    return false;
  }
  {
    absl::MutexLock lock(&a->mu);
    a->incarnations[task] = *back;
    if (a->heartbeat_failure.has_value() && a->heartbeat_failure->task == task) a->heartbeat_failure.reset();
  }
  if (a->heartbeat != nullptr) a->heartbeat->Update(task, *back);
  a->session->ForgetTask(task);
  log->info("job '{}': worker {} is back after {:.1f} s; its replica trains again", job_.name(), task,
            absl::ToDoubleSeconds(absl::Now() - failed_at));
  UpdateStatus([&](JobStatus* s) { s->set_recovery_seconds(absl::ToDoubleSeconds(absl::Now() - failed_at)); });
  return true;
}

}  // namespace master
}  // namespace weft
