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
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/env.h"
#include "graph/lowering.h"
#include "master/checkpointer.h"
#include "master/master_session.h"
#include "master/strategy.h"
#include "master/worker_cache.h"
#include "proto/job.pb.h"
#include "proto/master_service.pb.h"
#include "runtime/trainer.h"
#include "runtime/training_loop.h"

namespace weft {
namespace master {

struct JobRunnerOptions {
  Env* env = nullptr;  // checkpoints' file system; null: Env::Default()
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

  // Asynchronous replicas: one thread per replica runs its steps back to
  // back until `total_steps` have been taken between them; Next hands the
  // training loop their results in the order they finish.
  class AsyncReplicas {
   public:
    // Each replica runs up to `steps_per_call` steps per dispatch
    // (steps_per_execution).
    // `recover` (may be null) decides whether a replica whose step failed
    // goes on (JobRunner::RecoverReplica); its steps return to the pool.
    AsyncReplicas(MasterSession* session, const ReplicatedGraph& rg, const std::vector<std::string>& tasks,
                  int64_t total_steps, int64_t step_examples, int64_t steps_per_call,
                  const std::atomic<bool>* cancelled,
                  std::function<bool(const absl::Status&, const std::string& task)> recover);
    ~AsyncReplicas();  // stops handing out steps and joins the threads
    // The next finished steps, at most `max_steps` of them: a dispatch of
    // more is handed out in parts (all with its loss).
    absl::StatusOr<StepResult> Next(int64_t max_steps);
    // Holds new steps back, waits for the running ones, and runs `fn` with
    // the steps completed so far (for a checkpoint), then lets them go on.
    absl::Status Quiesce(const std::function<absl::Status(int64_t completed)>& fn);

   private:
    void Loop(const ReplicaNames& names, const std::string& task);
    bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

    MasterSession* const session_;
    const int64_t total_;
    const int64_t step_examples_;
    const int64_t steps_per_call_;
    const std::atomic<bool>* const cancelled_;
    const std::function<bool(const absl::Status&, const std::string&)> recover_;
    absl::Mutex mu_;
    int64_t remaining_ ABSL_GUARDED_BY(mu_);
    int active_ ABSL_GUARDED_BY(mu_) = 0;
    bool paused_ ABSL_GUARDED_BY(mu_) = false;
    std::deque<absl::StatusOr<StepResult>> done_ ABSL_GUARDED_BY(mu_);
    std::vector<std::thread> threads_;
  };

  // Sync PS replicas that aggregate the first k of N on the ps
  // (replicas_to_aggregate): one thread per replica runs its steps back to
  // back, like AsyncReplicas, but a step of the job is a global step: one
  // apply of every update, seen in the pushes' outcomes. Next hands the
  // training loop one result per global step; after `total_steps` of them
  // no replica starts another step.
  class AccumulatingReplicas {
   public:
    AccumulatingReplicas(MasterSession* session, const ReplicatedGraph& rg, int64_t total_steps,
                         int64_t step_examples, const std::atomic<bool>* cancelled);
    // Stops the replicas, aborting the steps still parked on the ps (their
    // gradients are not applied), and joins the threads.
    ~AccumulatingReplicas();
    absl::StatusOr<StepResult> Next();
    // Stale gradients the ps refused so far: one per variable pushed late,
    // and the replica steps that had any refused.
    int64_t refused() const;
    int64_t refused_steps() const;
    // Holds new replica steps back, aborts the ones parked on the ps (their
    // gradients are taken back out of the sums, not applied), waits for all
    // to return, and runs `fn` with the global steps applied so far, then
    // lets the replicas go on. A variable whose k-th push of the next global
    // step came in before the abort holds that step already: the state is
    // within one global step per variable, as k-of-N training allows.
    absl::Status Quiesce(const std::function<absl::Status(int64_t completed)>& fn);

   private:
    void Loop(const ReplicaNames& names);
    bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
    bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return active_ == 0; }
    bool paused_ ABSL_GUARDED_BY(mu_) = false;

    MasterSession* const session_;
    const int64_t total_;
    const int64_t step_examples_;
    const std::atomic<bool>* const cancelled_;
    mutable absl::Mutex mu_;
    bool stopping_ ABSL_GUARDED_BY(mu_) = false;
    int active_ ABSL_GUARDED_BY(mu_) = 0;
    std::vector<int64_t> applies_ ABSL_GUARDED_BY(mu_);  // per update: the pushes that applied a step
    int64_t global_steps_ ABSL_GUARDED_BY(mu_) = 0;      // handed to the loop
    double loss_sum_ ABSL_GUARDED_BY(mu_) = 0;          // accepted replica steps since the last global step
    int64_t losses_ ABSL_GUARDED_BY(mu_) = 0;
    int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
    int64_t refused_steps_ ABSL_GUARDED_BY(mu_) = 0;
    std::deque<absl::StatusOr<StepResult>> done_ ABSL_GUARDED_BY(mu_);
    std::vector<std::thread> threads_;
  };

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
