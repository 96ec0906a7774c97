// JobRunner: the master's step driver for one job.
//
// Without a strategy it creates a MasterSession over the job's training
// graph (nodes without a requested device run on the session's default
// device, worker 0; a raw graph model may put variables on "/job:ps" tasks)
// whose input is an InputBatch that reads the dataset on that task, loops
// over epochs or steps exactly as runtime/trainer.cc does, evaluates as the
// job asks and at the end, and reports the same figures as LocalTrainer
// (TrainResult). No example passes through the master, which only counts
// the training split from its files' headers.
//
// Thread-safety: Run is called once, from one thread; Cancel and cancelled
// may be called from any thread.
#ifndef WEFT_MASTER_JOB_RUNNER_H_
#define WEFT_MASTER_JOB_RUNNER_H_

#include <atomic>
#include <chrono>
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
#include "master/attempt_state.h"
#include "master/checkpointer.h"
#include "master/cluster_probe.h"
#include "master/dataset_uploads.h"
#include "master/distributed_job.h"
#include "master/master_session.h"
#include "master/member_workers.h"
#include "master/membership_watch.h"
#include "master/recovery_policy.h"
#include "master/step_drivers.h"
#include "master/step_watch.h"
#include "master/strategy.h"
#include "master/task_monitor.h"
#include "master/trace_merge.h"
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
  // Applies a change that the next progress update publishes (the per-task
  // step times). May be null.
  std::function<void(const std::function<void(JobStatus*)>&)> amend_status;
  // When a step counts as stalled and how the master asks its tasks about
  // it (master/step_watch.h).
  StepWatchOptions step_watch;
  // The job was found unfinished in the job store by a restarted master: it
  // resumes from its newest checkpoint (or from the start without one).
  bool resumed = false;
  // With `resumed`: the step the job had reached as last stored, to count
  // the steps trained again.
  int64_t reached_step = 0;
  // Where a job's DatasetSpec.upload_id is kept: before every attempt (and
  // before the one session of a job without a strategy) the runner copies
  // it to the tasks that read the data (master/dataset_push.h). Null: none.
  const DatasetUploads* uploads = nullptr;
};

// The step arithmetic (CountSteps) is in master/step_drivers.h, the
// recovery decisions (EffectiveRecovery, ChooseResumePoint, BlameTask,
// CheckRestartBudget, ClassifyReplicaFailure) in master/recovery_policy.h.

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
//
// An elastic job (JobSpec.elastic, docs/fault_tolerance.md) runs over its
// members (MemberWorkers). When a member fails, the runner waits
// elastic.wait_seconds for it; then the members that kept their state (and
// any that came back empty) form the next attempt's replicas, as many as
// split the global batch, from the variables they hold: the failed
// attempt's session stays open until the next one has read every
// replica's step counter and copied the furthest replica's variables to the
// others (RecoverMembers, ResumeFromMembers in job_runner_elastic.cc). Only
// when no member kept its state does it restore a checkpoint. An elastic
// PARAMETER_SERVER job's state is the ps's: any worker that answers may be
// a member, and only a ps that restarted sends it to its checkpoint.
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

  // Traces the next `steps` steps of the job's session (`weft trace`);
  // FAILED_PRECONDITION when no session runs steps now.
  absl::StatusOr<std::shared_ptr<TraceCollector>> StartTrace(int steps);

  // Stops the run after the current step, aborting that step on every task.
  void Cancel();
  bool cancelled() const { return cancelled_.load(); }
  // The master is stopping (SIGTERM): after the current step the job is
  // checkpointed (when it has a checkpoint dir) and Run returns state
  // PREEMPTED, for a restarted master to resume. Jobs without a strategy
  // stop as if cancelled.
  void Preempt();
  // An elastic job: train on `workers` workers from the next step boundary
  // on (`weft scale`), or on fewer when that many do not split the global
  // batch or do not answer. FAILED_PRECONDITION for a job that is not
  // elastic; INVALID_ARGUMENT outside elastic.min_workers..max_workers.
  absl::Status Scale(int workers);

 private:
  // A job without a strategy: one session over the training graph, its
  // input read on the task that trains (PlanUndistributedJob).
  absl::StatusOr<TrainResult> RunUndistributed(const std::function<void(const TrainProgress&)>& on_progress);
  absl::StatusOr<TrainResult> Train(MasterSession* session, const DistributedPlan& plan, int64_t train_examples,
                                    std::chrono::steady_clock::time_point created,
                                    const std::function<void(const TrainProgress&)>& on_progress);

  // A job with a strategy: attempts until one ends the job, recovering
  // between them.
  absl::StatusOr<TrainResult> RunDistributed(const std::function<void(const TrainProgress&)>& on_progress);
  // Where the first attempt starts, published; a resumed job first waits
  // for its tasks.
  absl::StatusOr<std::optional<ps::CheckpointEntry>> StartingPoint(Checkpointer* checkpointer);
  // After attempt `a` failed with `error`: an error ends the job FAILED, a
  // result ends it so (preempted while waiting), nullopt runs the next
  // attempt from `*resume`, which is set anew.
  absl::StatusOr<std::optional<TrainResult>> Recover(const absl::Status& error, AttemptState* a, int* restarts,
                                                     Checkpointer* checkpointer,
                                                     std::optional<ps::CheckpointEntry>* resume);
  TrainResult Cancelled(std::chrono::steady_clock::time_point created) const;
  // What Run returns for a preempted job that reached `step`.
  TrainResult Preempted(int64_t step) const;

  // One attempt: plan, session, heartbeat, restore, the training loop and
  // teardown.
  absl::StatusOr<TrainResult> RunAttempt(int attempt, const std::optional<ps::CheckpointEntry>& resume,
                                         Checkpointer* checkpointer, int64_t train_examples,
                                         const std::function<void(const TrainProgress&)>& on_progress,
                                         AttemptState* a);
  absl::StatusOr<DistributedPlan> PlanAttempt(int64_t start_step, const ClusterProbe& probe);
  // Copies the job's uploaded dataset (if it names one) to `tasks`.
  absl::Status ShipDataset(const std::vector<std::string>& tasks);
  // The session's tasks, incarnations and ps tasks into `a`, and the
  // heartbeat that aborts its steps when a task fails.
  std::unique_ptr<Heartbeat> WatchTasks(const DistributedPlan& plan, MasterSession* session, AttemptState* a);
  // Registers the training signatures and restores `resume` when there is
  // one, then publishes that the job runs again from `start_step`.
  absl::Status PrepareAttempt(int attempt, const std::string& handle, const DistributedPlan& plan,
                              MasterSession* session, const std::optional<ps::CheckpointEntry>& resume,
                              int64_t start_step, Checkpointer* checkpointer);
  // Async PS: a replica's step failed. True when the replica may go on: the
  // failure was another task's (a worker that the heartbeat or the step
  // found dead), or its own worker died and came back in time (the session
  // then registers its graphs anew; in time: recovery.task_wait_seconds,
  // or an elastic job's wait_seconds). The other replicas train on while
  // it waits. False ends the attempt with the error: the job ends, or an
  // elastic one goes on without the worker (`a->regrouped`).
  bool RecoverReplica(const absl::Status& error, const std::string& task, AttemptState* a);
  // RecoverReplica for attempt `a` of a PS job that may restart; null
  // otherwise (a replica's failure ends the attempt).
  ReplicaRecovery ReplicaRecoveryOf(AttemptState* a);

  // Elastic jobs (job_runner_elastic.cc). The first members: as many of the
  // cluster's workers as split the global batch.
  absl::Status ChooseFirstMembers();
  // An elastic job's watch over attempt `a` (null for other jobs): it asks
  // for a membership change at the next step boundary when the job may
  // grow onto workers that answer, or `weft scale` asked for a size.
  std::unique_ptr<MembershipWatch> WatchMembership(AttemptState* a);
  // The cluster's workers that answer a probe now and do not drain, with
  // their incarnations when `incarnations` is not null.
  std::vector<std::string> AnsweringWorkers(std::map<std::string, uint64_t>* incarnations) const;
  // Writes the members into the job's status (its `workers`).
  void PublishWorkers();
  // RecoverMembers when the variables are gone with `lost`: the members
  // are the `answering` workers that split the batch (if enough do), and
  // the change from `before` is recorded once the checkpoint is restored.
  absl::Status GoToCheckpoint(const std::vector<std::string>& answering, const std::vector<std::string>& before,
                              const std::string& reason, const std::string& lost, absl::Time failed_at);
  // Logs the membership change this attempt made (change_*), which it went
  // on with from `step` on `replica_tasks`, `how` saying where the
  // variables came from, and adds it to the job's status.
  void RecordMembershipChange(int64_t step, const std::vector<std::string>& replica_tasks, const std::string& how);
  // Whether the job's variables live once, on its ps (PARAMETER_SERVER),
  // rather than on every worker.
  bool SharesVariables() const;
  // The first ps that no longer holds the variables the attempt started
  // with (it does not answer, or its incarnation differs from `known`), as
  // "TASK, which ..."; "" when every ps kept them.
  std::string PsThatLostTheVariables(const std::map<std::string, uint64_t>& known) const;
  // How many of `available` workers the job trains on: ElasticReplicaCount
  // under the size `weft scale` asked for.
  int ElasticCount(int available) const;
  // After attempt `a` ended for `reason` (a member failed at `failed_at`,
  // then first waits elastic.wait_seconds for the members; or a change
  // the membership watch asked for): sets the next attempt to go on from
  // the memory of the cluster's workers that answer (true), as many as
  // split the global batch and the size asked for, those that kept their
  // variables first. False when none kept them (or the job is being
  // cancelled or preempted): the caller recovers the checkpoint way.
  // UNAVAILABLE when too few answer.
  absl::StatusOr<bool> RecoverMembers(const std::string& reason, absl::Time failed_at, bool wait, AttemptState* a);
  // The first moves of an attempt that goes on from the members' memory,
  // with `*plan` made for `*start_step` and its session open: reads every
  // replica's step counter, re-plans at the furthest one when that is not
  // `*start_step` (reopening the session), copies that replica's variables
  // to the others, and closes the failed attempt's session, whose graphs
  // had kept the variables alive until then. Records the membership change.
  absl::Status ResumeFromMembers(const std::string& handle, const ClusterProbe& probe, DistributedPlan* plan,
                                 MasterSession** session, int64_t* start_step);
  // Keeps the session of a failed elastic attempt open (its graphs hold
  // the replicas' variables), unless one is kept already: the oldest is the
  // one sure to hold them, and this one is closed.
  void RetireSession();
  void CloseRetiredSession();

  // The job's session, kept in session_ while it runs so that Cancel can
  // abort its steps; CloseSession takes it back and closes it. `probe`
  // (may be null: the session asks the tasks itself) is the attempt's.
  absl::StatusOr<MasterSession*> OpenSession(const std::string& handle, const GraphDef& graph,
                                             const ClusterProbe* probe = nullptr);
  void CloseSession();
  // Closes `owned` (if any), logging a failure to deregister its graphs.
  void CloseOwned(std::unique_ptr<MasterSession> owned) const;
  void UpdateStatus(const std::function<void(JobStatus*)>& update) const {
    if (options_.update_status) options_.update_status(update);
  }

  const JobSpec job_;
  const TrainingGraph training_;
  const std::string session_handle_;
  // An elastic job's members (null otherwise); workers_ is then this view.
  const std::unique_ptr<MemberWorkers> members_;
  // Any other job's tasks, as they are when it starts (null when elastic).
  const std::unique_ptr<TaskSnapshot> snapshot_;
  WorkerCacheInterface* const workers_;
  const JobRunnerOptions options_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> preempted_{false};
  absl::Mutex mu_;
  // Set while Run uses it, so Cancel can abort its steps.
  std::unique_ptr<MasterSession> session_ ABSL_GUARDED_BY(mu_);
  // Elastic: the failed attempt's session, open until the next attempt has
  // taken the variables its graphs keep alive.
  std::unique_ptr<MasterSession> retired_ ABSL_GUARDED_BY(mu_);
  // Elastic: the next attempt goes on from the members' memory, at about
  // this step (the furthest replica's counter decides).
  bool from_memory_ = false;
  // Elastic: the size `weft scale` asked for (0: none).
  std::atomic<int> target_workers_{0};
  int64_t memory_step_ = 0;
  // The failure the membership change answers, for its record.
  std::string change_reason_;
  absl::Time change_failed_at_;
  std::vector<std::string> change_left_;
  std::vector<std::string> change_joined_;
  // A change the checkpoint way made, recorded once the checkpoint is back.
  bool change_restores_ = false;
  // Times the steps of every session Run opens and diagnoses stalls; set
  // for the duration of Run (only its thread touches the pointer).
  std::unique_ptr<StepWatch> watch_;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_JOB_RUNNER_H_
