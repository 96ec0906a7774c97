#include "master/checkpoint_hook.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace weft {
namespace master {

CheckpointHook::CheckpointHook(const JobSpec& job, Checkpointer* checkpointer, std::string handle,
                               AttemptState* attempt, StepDriver* driver, const std::atomic<bool>* preempted,
                               StatusUpdater update_status)
    : job_(job),
      checkpointer_(checkpointer),
      handle_(std::move(handle)),
      attempt_(attempt),
      driver_(driver),
      preempted_(preempted),
      update_status_(std::move(update_status)) {}

absl::Status CheckpointHook::SaveAt(int64_t step) {
  // PARAMETER_SERVER keeps every variable on the ps tasks.
  std::vector<std::string> holders;
  if (job_.strategy().kind() == StrategySpec::PARAMETER_SERVER) {
    holders.assign(attempt_->ps_tasks.begin(), attempt_->ps_tasks.end());
  }
  ASSIGN_OR_RETURN(ps::CheckpointEntry saved, checkpointer_->Save(handle_, step, holders));
  attempt_->saved_step = step;
  if (update_status_) {
    update_status_([&](JobStatus* s) {
      s->set_checkpoint_step(saved.step);
      s->set_checkpoint_path(saved.path);
    });
  }
  return absl::OkStatus();
}

absl::Status CheckpointHook::Save(int64_t step) {
  return driver_->AtRest(step, [this](int64_t at) { return SaveAt(at); });
}

absl::Status CheckpointHook::AfterSteps(int64_t step) {
  attempt_->reached_step.store(step);
  std::string draining;
  {
    absl::MutexLock lock(&attempt_->mu);
    draining = attempt_->draining;
  }
  const bool preempted = preempted_->load();
  if (checkpointer_->enabled() && (preempted || !draining.empty() || checkpointer_->Due(step))) {
    if (absl::Status saved = Save(step); !saved.ok()) {
      // A preemption needs its checkpoint. A periodic one that fails (a
      // task lost meanwhile, a full disk) leaves no manifest, so nothing is
      // damaged: training goes on, and a lost task is recovered from the
      // previous checkpoint by the step that meets it.
      if (preempted || !draining.empty()) return saved;
      Logger("master")->warn("job '{}': the checkpoint of step {} failed; training goes on: {}", job_.name(), step,
                             saved.ToString());
    }
  }
  if (!draining.empty()) {
    absl::MutexLock lock(&attempt_->mu);
    attempt_->drained = draining;
    return absl::UnavailableError(absl::StrCat("task ", draining, " is stopping (SIGTERM)"));
  }
  {
    // An elastic job's membership changes between steps; the steps still in
    // flight end whole or not at all on each replica (master/elastic_plan.h).
    absl::MutexLock lock(&attempt_->mu);
    if (!attempt_->regroup.empty()) {
      attempt_->regrouped = attempt_->regroup;
      return absl::AbortedError(absl::StrCat("membership change: ", attempt_->regroup));
    }
  }
  if (preempted) {
    attempt_->preempted = true;
    return absl::CancelledError("the master is stopping (SIGTERM)");
  }
  return absl::OkStatus();
}

absl::Status CheckpointHook::Finish(int64_t steps) {
  if (!checkpointer_->enabled() || attempt_->saved_step == steps) return absl::OkStatus();
  return Annotate(Save(steps), "the final checkpoint");
}

}  // namespace master
}  // namespace weft
