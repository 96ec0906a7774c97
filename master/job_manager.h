// JobManager: the master's jobs, from submission to their end.
//
// Submit validates a JobSpec (client/job_file.h's ValidateJob, then lowering,
// so a bad model names its layer or node) and returns a job id at once; the
// job then runs on its own thread through a JobRunner. Every change of state
// (PENDING, RUNNING, RECOVERING and back while a task is lost, then
// SUCCEEDED, FAILED or CANCELLED) and, while it runs, progress at most once
// per `progress_interval` is published to the job's watchers; state changes
// and, every 2 s, progress go to the JobStore. At construction the jobs the
// store holds unfinished (a previous master died or stopped) resume from
// their checkpoints under their ids.
//
// With a checkpoint root (JobManagerOptions::checkpoint_root), Submit
// confines a job's checkpoint.dir and checkpoint.resume_from to it (each
// relative to it or absolute inside it) and refuses directories whose OWNER
// file names another user than the job's owner (master/checkpointer.h).
//
// Cancel stops a job after its current step, aborting that step on every
// task; the job ends CANCELLED. A failing step ends it FAILED with the
// error, which names the task and node.
//
// Thread-safety: thread-safe. Watch callbacks run on the job's thread (the
// first one on Watch's caller); they must not block and must not destroy
// their own JobWatch.
#ifndef WEFT_MASTER_JOB_MANAGER_H_
#define WEFT_MASTER_JOB_MANAGER_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/confined_root.h"
#include "common/env.h"
#include "master/job_runner.h"
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
  // other than NONE; UNAVAILABLE after Shutdown.
  // `owner`: the user who submitted it (recorded in JobStatus.owner; "" for
  // an insecure master). Ids are "job-<sequence>-<64 random bits>".
  absl::StatusOr<std::string> Submit(const JobSpec& job, const std::string& owner = "");
  // NOT_FOUND for an unknown id.
  absl::StatusOr<JobStatus> Get(const std::string& job_id) const;
  // Every job, oldest first.
  std::vector<JobStatus> List() const;
  // NOT_FOUND for an unknown id, FAILED_PRECONDITION for a job that has
  // already ended. Returns at once; the job reaches CANCELLED soon after.
  absl::Status Cancel(const std::string& job_id);
  // Calls `on_status` with the job's status now, then at every published
  // change until the terminal status. NOT_FOUND for an unknown id.
  absl::StatusOr<std::unique_ptr<JobWatch>> Watch(const std::string& job_id,
                                                  std::function<void(const JobStatus&)> on_status);
  // Blocks until the job has ended and its watchers have been given the
  // terminal status, or `timeout` passes (DEADLINE_EXCEEDED).
  absl::StatusOr<JobStatus> Wait(const std::string& job_id, absl::Duration timeout = absl::InfiniteDuration());

  // Cancels every job that has not ended and joins their threads; later
  // Submit calls fail with UNAVAILABLE. Idempotent.
  void Shutdown();

 private:
  struct Job;
  class Watcher;

  std::shared_ptr<Job> Find(const std::string& job_id) const;
  JobRunnerOptions RunnerOptions(Job* job, const std::string& owner);
  void RunJob(Job* job);
  // Applies `update` to the job's status; publishes it when `force` or when
  // progress_interval has passed since the last publication.
  void Update(Job* job, const std::function<void(JobStatus*)>& update, bool force);
  void Persist(Job* job);
  // Joins the threads of jobs that have finished, so a long-lived master
  // does not accumulate them.
  void ReapFinishedThreads();

  const JobManagerOptions options_;
  std::unique_ptr<JobStoreInterface> own_store_;
  JobStoreInterface* const store_;

  absl::Mutex shutdown_mu_;  // serialises Shutdown calls
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_JOB_MANAGER_H_
