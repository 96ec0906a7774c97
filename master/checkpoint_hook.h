// The checkpoints of one attempt of a distributed job, taken between steps
// (StepSource::after_steps): every_steps / every_seconds as the job asks,
// when a task drains after SIGTERM (then the attempt ends for a recovery),
// when the master is preempted (then the attempt ends PREEMPTED), and the
// last state of a finished job, for a later job to start from.
//
// Thread-safety: used from the training loop's thread only.
#ifndef WEFT_MASTER_CHECKPOINT_HOOK_H_
#define WEFT_MASTER_CHECKPOINT_HOOK_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "master/attempt_state.h"
#include "master/checkpointer.h"
#include "master/step_drivers.h"
#include "proto/job.pb.h"

namespace weft {
namespace master {

class CheckpointHook {
 public:
  // Everything borrowed outlives the hook. `handle` is the attempt's
  // session; `update_status` may be null.
  CheckpointHook(const JobSpec& job, Checkpointer* checkpointer, std::string handle, AttemptState* attempt,
                 StepDriver* driver, const std::atomic<bool>* preempted, StatusUpdater update_status);

  // After the loop's steps up to `step`: saves when due, and ends the
  // attempt (UNAVAILABLE for a draining task, CANCELLED for a preempted
  // master, both after their checkpoint; ABORTED for an elastic job's
  // membership change) when it must stop.
  absl::Status AfterSteps(int64_t step);
  // The final checkpoint of a job that trained `steps` steps, unless the
  // last one saved is of that step already, or the job keeps none.
  absl::Status Finish(int64_t steps);

 private:
  // Saves at the step the variables hold once the replicas are at rest.
  absl::Status Save(int64_t step);
  absl::Status SaveAt(int64_t step);

  const JobSpec& job_;
  Checkpointer* const checkpointer_;
  const std::string handle_;
  AttemptState* const attempt_;
  StepDriver* const driver_;
  const std::atomic<bool>* const preempted_;
  const StatusUpdater update_status_;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_CHECKPOINT_HOOK_H_
