// JobRunner: the master's step driver for one job.
//
// It creates a MasterSession over the job's training graph (nodes without a
// requested device run on the session's default device, worker 0; a raw
// graph model may put variables on "/job:ps" tasks), loads the dataset on
// the master and feeds each batch through the step's feeds, loops over
// epochs or steps exactly as runtime/trainer.cc does, evaluates as the job
// asks and at the end, and reports the same figures as LocalTrainer
// (TrainResult). The data pipeline moves to the workers with the
// distribution strategies.
//
// Thread-safety: Run is called once, from one thread; Cancel and cancelled
// may be called from any thread.
#ifndef WEFT_MASTER_JOB_RUNNER_H_
#define WEFT_MASTER_JOB_RUNNER_H_

#include <atomic>
#include <cstdint>
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
#include "absl/time/time.h"
#include "common/env.h"
#include "graph/lowering.h"
#include "master/checkpointer.h"
#include "master/master_session.h"
#include "master/strategy.h"
#include "master/task_monitor.h"
#include "master/worker_cache.h"
#include "proto/job.pb.h"
#include "proto/master_service.pb.h"
#include "ps/checkpoint_index.h"
#include "runtime/trainer.h"
#include "runtime/training_loop.h"

namespace weft {
namespace master {

struct JobRunnerOptions {
  Env* env = nullptr;  // checkpoints' file system; null: Env::Default()
  // The master's checkpoint root, and the job's owner, for its Checkpointer
  // (CheckpointerOptions).
  std::optional<ConfinedRoot> checkpoint_root;
  std::string owner;
  // Applies a change to the job's status and publishes it at once: entering
  // and leaving RECOVERING, the failed task, checkpoints. May be null.
  std::function<void(const std::function<void(JobStatus*)>&)> update_status;
  // The job was found unfinished in the job store by a restarted master: it
  // resumes from its newest checkpoint (or from the start without one).
  bool resumed = false;
  // With `resumed`: the step the job had reached as last stored, to count
  // the steps trained again.
  int64_t reached_step = 0;
};

// The arithmetic and the decisions of a distributed job's runner, apart
// from the runner so that each can be checked on its own.

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

// The job's recovery.* settings with their defaults filled in.
struct RecoverySettings {
  absl::Duration heartbeat_interval;
  absl::Duration heartbeat_timeout;
  absl::Duration task_wait;
  int max_restarts = 0;  // 0: the first task failure ends the job
};
RecoverySettings RecoverySettingsOf(const RecoveryPolicy& policy);

// Where a job starts, given what Checkpointer::FindResumePoint found: that
// checkpoint; nullopt (step 0) when there is none, except that a job that
// names checkpoint.resume_from must find one there at its start
// (FAILED_PRECONDITION); any other error as it is. A recovery
// (`at_start` false) may start over from step 0.
absl::StatusOr<std::optional<ps::CheckpointEntry>> ChooseResumePoint(const JobSpec& job,
                                                                     absl::StatusOr<ps::CheckpointEntry> found,
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

// Fault tolerance (jobs with a strategy; docs/fault_tolerance.md): while a
// job runs, a Heartbeat watches its tasks. A step that fails because a task
// died, restarted (new incarnation) or stopped answering, or a task that
// drains after SIGTERM, ends the attempt: every step is aborted, the job
// goes RECOVERING, the runner waits for every task to answer again
// (recovery.task_wait_seconds), then starts a new session, restores the
// newest valid checkpoint and trains on from its step. Under async
// PARAMETER_SERVER a lost worker costs nothing: its replica waits for it
// while the others train on, its steps handed to them. Any other error ends
// the job FAILED, as does a task that does not come back in time (naming
// it) or more than recovery.max_restarts recoveries.
class JobRunner {
 public:
  // `training` is LowerJob(job). `session_handle` names the job's session to
  // the tasks. `workers` must outlive the runner.
  JobRunner(JobSpec job, TrainingGraph training, std::string session_handle, WorkerCacheInterface* workers,
            JobRunnerOptions options = {});
  ~JobRunner();

  // Trains to the job's end. `on_progress` (optional) runs after every step
  // on the calling thread. Returns state SUCCEEDED or CANCELLED; an error
  // names the task, node or file at fault.
  absl::StatusOr<TrainResult> Run(const std::function<void(const TrainProgress&)>& on_progress = nullptr);

  // Stops the run after the current step, aborting that step on every task.
  void Cancel();
  bool cancelled() const { return cancelled_.load(); }
  // The master is stopping (SIGTERM): after the current step the job is
  // checkpointed (when it has a checkpoint dir) and Run returns state
  // "PREEMPTED", for a restarted master to resume. Jobs without a strategy
  // stop as if cancelled.
  void Preempt();

 private:
  struct Data;
  struct Attempt;
  absl::StatusOr<TrainResult> RunAttempt(int attempt, const std::optional<ps::CheckpointEntry>& resume,
                                         Checkpointer* checkpointer, int64_t train_examples,
                                         const std::function<void(const TrainProgress&)>& on_progress, Attempt* a);
  // What Run returns for a preempted job that reached `step`.
  TrainResult Preempted(int64_t step) const;
  void UpdateStatus(const std::function<void(JobStatus*)>& update) const {
    if (options_.update_status) options_.update_status(update);
  }
  // Async PS: a replica's step failed. True when the replica may go on: the
  // failure was another task's (a worker that the heartbeat or the step
  // found dead), or its own worker died and came back in time (the session
  // then registers its graphs anew). False ends the job with the error.
  bool RecoverReplica(const absl::Status& error, const std::string& task, Attempt* a);
  absl::StatusOr<TrainResult> Train(MasterSession* session, const Data& data,
                                    const std::function<void(const TrainProgress&)>& on_progress);
  absl::StatusOr<TrainResult> RunDistributed(const std::function<void(const TrainProgress&)>& on_progress);

  const JobSpec job_;
  const TrainingGraph training_;
  const std::string session_handle_;
  WorkerCacheInterface* const workers_;
  const JobRunnerOptions options_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> preempted_{false};
  absl::Mutex mu_;
  // Set while Run uses it, so Cancel can abort its steps.
  std::unique_ptr<MasterSession> session_ ABSL_GUARDED_BY(mu_);
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_JOB_RUNNER_H_
