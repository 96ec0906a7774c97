// How the steps of one attempt of a distributed job run, chosen from its
// plan (master/distributed_job.h):
//   sync, replicas_to_aggregate 0  every replica in one lockstep step per
//     dispatch (up to steps_per_execution steps per dispatch), with
//     steps_in_flight dispatches pipelined (master/step_pipeline.h);
//   sync, replicas_to_aggregate k  replicas run free and a step of the job
//     is the ps's global step (AccumulatingReplicas);
//   async  each replica steps on its own thread (AsyncReplicas).
// Also the step arithmetic of a job (CountSteps) and the fetches and
// targets its steps run (TrainingSignatures), registered before a restore.
//
// Thread-safety: a StepDriver is used from the training loop's thread only;
// the replica drivers' threads are internal.
#ifndef WEFT_MASTER_STEP_DRIVERS_H_
#define WEFT_MASTER_STEP_DRIVERS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "master/distributed_job.h"
#include "master/master_session.h"
#include "master/replica_drivers.h"
#include "master/step_pipeline.h"
#include "proto/job.pb.h"
#include "runtime/training_loop.h"

namespace weft {
namespace master {

// How the steps of a distributed job count. A step of a sync job runs every
// replica on its share of the global batch; an async replica's step is one
// step of the job; with replicas_to_aggregate k > 0 a step is a global step,
// k replicas' batches applied together.
struct StepCounts {
  int64_t step_examples = 0;      // examples one step trains on
  int64_t batches_per_epoch = 0;  // steps that see the training split once
  int64_t total_steps = 0;        // the job's steps (job.steps, else epochs' worth)
};
// `train_examples`: the training split's size; each of `num_replicas`
// replicas reads its strided shard in batches of `replica_batch`.
// REQUIRES: num_replicas > 0, replica_batch > 0, replicas_to_aggregate >= 0.
StepCounts CountSteps(const JobSpec& job, int64_t train_examples, int num_replicas, int64_t replica_batch, bool sync,
                      int replicas_to_aggregate);

// The {fetches, targets} of every kind of step the plan's session runs.
using Signature = std::pair<std::vector<std::string>, std::vector<std::string>>;
std::vector<Signature> TrainingSignatures(const DistributedPlan& plan);

// Decides whether an async replica whose step failed on `task` goes on
// (AsyncReplicas' `recover`). May be null.
using ReplicaRecovery = std::function<bool(const absl::Status& error, const std::string& task)>;

class StepDriver {
 public:
  // `session` and `cancelled` outlive the driver. The attempt trains steps
  // start_step+1 .. total_steps of `counts`. `recover` applies to async
  // replicas only.
  StepDriver(const JobSpec& job, const DistributedPlan& plan, MasterSession* session, const StepCounts& counts,
             int64_t start_step, const std::atomic<bool>* cancelled, ReplicaRecovery recover);
  ~StepDriver();  // Stop()

  // Runs at least one and at most `max_steps` steps (StepSource::step).
  // Lockstep replicas return one dispatch's steps, with the next ones
  // already in flight (steps_in_flight), but never a step beyond
  // `max_steps` (at an epoch's end nothing is in flight) nor beyond a
  // multiple of checkpoint.every_steps (a dispatch stops there too).
  absl::StatusOr<StepResult> Step(int64_t max_steps);
  // Runs `fn` with the step the job's variables hold while no step runs:
  // for lockstep replicas, the dispatches in flight end first, and the step
  // is `loop_step` plus theirs (the loop gets them from the next Step
  // calls; when one failed, that failure is returned and `fn` not run); for
  // free-running ones, the replicas are held back first and the step is the
  // one they completed.
  absl::Status AtRest(int64_t loop_step, const std::function<absl::Status(int64_t step)>& fn);
  // Ends the replicas' threads (once; later calls do nothing).
  void Stop();

 private:
  const std::string job_name_;
  const int64_t start_step_;
  MasterSession* const session_;
  // Lockstep: one dispatch's loss of every replica, as a StepResult.
  StepResult Result(int64_t steps, const std::vector<Tensor>& losses) const;

  const std::atomic<bool>* const cancelled_;
  std::vector<std::string> losses_;   // lockstep: every replica's loss
  std::vector<std::string> targets_;  // lockstep: the step's train targets
  int64_t steps_per_call_ = 1;
  const bool auto_steps_;  // steps_per_execution 0 (lockstep)
  AutoStepsPerDispatch auto_;
  const int64_t checkpoint_every_;  // the job's checkpoint.every_steps, 0 without
  int64_t handed_out_;              // lockstep: the last step handed to the loop
  int64_t dispatches_ = 0;          // lockstep: issued so far
  int64_t step_examples_ = 0;
  std::vector<Tensor> out_;
  std::unique_ptr<StepPipeline> lockstep_;
  std::unique_ptr<AsyncReplicas> async_;
  std::unique_ptr<AccumulatingReplicas> accumulating_;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_STEP_DRIVERS_H_
