// JobManager: the master's jobs, from submission to their end.
//
// Submit validates a JobSpec (job/job_spec.h's ValidateJob, then lowering,
// so a bad model names its layer or node) and returns a job id at once; the
// job then waits, PENDING, in a FIFO queue until one of a fixed number of
// runner threads (JobManagerOptions::max_running_jobs) takes it and runs it
// through a JobRunner. A caller cannot make the master start threads: at
// most max_queued_jobs jobs wait, and a Submit past that is refused with
// RESOURCE_EXHAUSTED while the queued and running jobs go on. Every change of state
// (PENDING, RUNNING, RECOVERING and back while a task is lost, then
// SUCCEEDED, FAILED or CANCELLED) and, while it runs, progress at most once
// per `progress_interval` is published to the job's watchers; state changes
// and, every 2 s, progress go to the JobStore. At construction the jobs the
// store holds unfinished (a previous master died or stopped) resume from
// their checkpoints under their ids, through the same queue (RECOVERING
// while they wait; the queue bound does not apply to them).
//
// With a checkpoint root (JobManagerOptions::checkpoint_root), Submit
// confines a job's checkpoint.dir and checkpoint.resume_from to it (each
// relative to it or absolute inside it) and refuses directories whose OWNER
// file names another user than the job's owner (master/checkpointer.h).
//
// Cancel stops a job after its current step, aborting that step on every
// task; the job ends CANCELLED. A job still in the queue leaves it and ends
// CANCELLED without ever running. A failing step ends it FAILED with the
// error, which names the task and node.
//
// Thread-safety: thread-safe. Watch callbacks run on the runner thread
// running the job, or for a job that ends in the queue on the thread of the
// Cancel or Shutdown that ended it (the first one on Watch's caller); they
// must not block and must not destroy their own JobWatch.
#ifndef WEFT_MASTER_JOB_MANAGER_H_
#define WEFT_MASTER_JOB_MANAGER_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/confined_root.h"
#include "common/env.h"
#include "master/dataset_uploads.h"
#include "master/job_runner.h"
#include "master/job_telemetry.h"
#include "master/job_store.h"
#include "master/worker_cache.h"
#include "proto/job.pb.h"
#include "proto/master_service.pb.h"

namespace weft {
namespace master {

struct JobManagerOptions {
  // The tasks jobs run on; must outlive the manager.
  WorkerCacheInterface* workers = nullptr;
  // Where job records go; null keeps them in a MemoryJobStore of its own.
  // Must outlive the manager.
  JobStoreInterface* store = nullptr;
  // Least time between two progress updates of one job.
  absl::Duration progress_interval = absl::Seconds(1);
  // The checkpoints' file system; null: Env::Default().
  Env* env = nullptr;
  // Shutdown preempts running jobs instead of cancelling them: each is
  // checkpointed after its current step and stays RECOVERING in the store,
  // for the next master over the same store to resume (a durable store).
  bool preempt_on_shutdown = false;
  // The directory every job's checkpoints are confined to (the master's
  // --checkpoint_root). Unset: none, checkpoint directories are absolute
  // paths used as given (in-process tests; the daemon always sets one).
  std::optional<ConfinedRoot> checkpoint_root;
  // Runner threads, started at construction: at most this many jobs run at
  // once (`weft master --max_running_jobs`). Values below 1 count as 1.
  int max_running_jobs = 4;
  // Submitted jobs that may wait for a runner (`--max_queued_jobs`); past
  // it Submit fails with RESOURCE_EXHAUSTED. Values below 0 count as 0.
  int max_queued_jobs = 256;
  // When a job's step counts as stalled (`weft master --stall_after_seconds`,
  // `--stall_factor`; master/step_watch.h).
  StepWatchOptions step_watch;
  // Uploaded datasets: a job naming one copies it to its tasks before each
  // attempt (JobRunnerOptions::uploads). Null: none. Must outlive the manager.
  const DatasetUploads* uploads = nullptr;
};

// A Watch subscription; destroying it unsubscribes, after which its callback
// is not running and never runs again.
class JobWatch {
 public:
  virtual ~JobWatch() = default;
};

bool IsTerminal(JobState state);

class JobManager {
 public:
  explicit JobManager(JobManagerOptions options);
  // Shutdown().
  ~JobManager();
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // INVALID_ARGUMENT naming the field, layer or node at fault (a checkpoint
  // directory outside the checkpoint root among them); PERMISSION_DENIED for
  // a checkpoint directory of another user; UNIMPLEMENTED for a strategy
  // other than NONE; RESOURCE_EXHAUSTED, naming --max_queued_jobs, when the
  // queue is full (nothing else changes; retry once a job has ended);
  // UNAVAILABLE after Shutdown.
  // `owner`: the user who submitted it (recorded in JobStatus.owner; "" for
  // an insecure master). Ids are "job-<sequence>-<64 random bits>".
  absl::StatusOr<std::string> Submit(const JobSpec& job, const std::string& owner = "");
  // NOT_FOUND for an unknown id.
  absl::StatusOr<JobStatus> Get(const std::string& job_id) const;
  // Every job, oldest first.
  std::vector<JobStatus> List() const;
  // The jobs' Prometheus series and curve history (monitoring port).
  const JobTelemetry& telemetry() const { return telemetry_; }
  // NOT_FOUND for an unknown id, FAILED_PRECONDITION for a job that has
  // already ended. Returns at once; the job reaches CANCELLED soon after.
  absl::Status Cancel(const std::string& job_id);
  // Asks a running elastic job to train on `workers` workers
  // (JobRunner::Scale). NOT_FOUND for an unknown job; FAILED_PRECONDITION
  // for one that has ended or does not run yet.
  absl::Status Scale(const std::string& job_id, int workers);
  // Records the running job's next `steps` steps on every task and merges
  // them into Chrome trace JSON (master/trace_merge.h). FAILED_PRECONDITION
  // when the job runs no steps now; after `timeout`, what was recorded
  // (DEADLINE_EXCEEDED when nothing was).
  absl::StatusOr<TraceJobResponse> Trace(const std::string& job_id, int steps, absl::Duration timeout);
  // Calls `on_status` with the job's status now, then at every published
  // change until the terminal status. NOT_FOUND for an unknown id.
  absl::StatusOr<std::unique_ptr<JobWatch>> Watch(const std::string& job_id,
                                                  std::function<void(const JobStatus&)> on_status);
  // Blocks until the job has ended and its watchers have been given the
  // terminal status, or `timeout` passes (DEADLINE_EXCEEDED).
  absl::StatusOr<JobStatus> Wait(const std::string& job_id, absl::Duration timeout = absl::InfiniteDuration());

  // Ends every queued job without running it (CANCELLED; with
  // preempt_on_shutdown a job with a strategy stays unfinished in the store,
  // for the next master), cancels (or preempts) the running ones and joins
  // the runner threads; later Submit calls fail with UNAVAILABLE.
  // Idempotent.
  void Shutdown();

 private:
  struct Job;
  class Watcher;

  std::shared_ptr<Job> Find(const std::string& job_id) const;
  // The job, unless it is unknown (NOT_FOUND) or has ended
  // (FAILED_PRECONDITION naming its final state).
  absl::StatusOr<std::shared_ptr<Job>> FindUnended(const std::string& job_id) const;
  // RESOURCE_EXHAUSTED, naming the limits, when a job submitted now would
  // wait for a runner past max_queued_jobs.
  absl::Status CheckQueueRoomLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  JobRunnerOptions RunnerOptions(Job* job, const std::string& owner);
  // A runner thread: runs queued jobs, oldest first, until Shutdown.
  void RunnerLoop();
  void RunJob(Job* job);
  // Ends a job that left the queue without running; `at_shutdown`: Shutdown
  // emptied the queue (else Cancel took it out).
  void EndQueued(Job* job, bool at_shutdown);
  // Applies `update` to the job's status; publishes it when `force` or when
  // progress_interval has passed since the last publication.
  void Update(Job* job, const std::function<void(JobStatus*)>& update, bool force);
  void Persist(Job* job);

  const JobManagerOptions options_;
  std::unique_ptr<JobStoreInterface> own_store_;
  JobStoreInterface* const store_;

  absl::Mutex shutdown_mu_;  // serialises Shutdown calls
  mutable absl::Mutex mu_;
  JobTelemetry telemetry_;
  std::map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // Jobs waiting for a runner, oldest first. A job leaves it exactly once:
  // to a runner, to Cancel or to Shutdown, whichever takes it under mu_;
  // that one alone publishes its statuses from then on.
  std::deque<std::shared_ptr<Job>> queue_ ABSL_GUARDED_BY(mu_);
  // Runners running a job (the others wait on queue_).
  int busy_runners_ ABSL_GUARDED_BY(mu_) = 0;
  // Started by the constructor, joined by Shutdown (under shutdown_mu_).
  std::vector<std::thread> runners_;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_JOB_MANAGER_H_
