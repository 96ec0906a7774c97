// Master: the master's request handlers, free of gRPC.
//
// It holds the interactive sessions (handle -> MasterSession), the
// JobManager, and the cluster's tasks through a WorkerCacheInterface. Each
// handler has the shape `XAsync(request, response, done)`: it returns at
// once and calls `done` exactly once with the outcome. Work that blocks
// (graph registration, steps, asking the tasks for devices, lowering a job)
// runs on the master's own thread pool, never on the caller's thread, so a
// gRPC reaction can call a handler directly.
//
// Every handler takes the Caller (common/caller.h) and decides what it may
// do: sessions, devices and jobs serve users; a session and a job belong to
// the user who created them and only they (or an admin) may use, watch or
// cancel them; ListJobs shows a user their own jobs (an admin every job);
// Reset of everything needs an admin, Reset of one's own containers a user.
// Refusals are PERMISSION_DENIED naming the caller.
//
// Variable containers (master/containers.h): CreateSession and
// ExtendSession scope each Variable's attr `container` by the caller's
// owner before the tasks see it, refusing a bad name with INVALID_ARGUMENT
// naming the node.
//
// Errors: NOT_FOUND for an unknown session or job; INVALID_ARGUMENT for a bad
// graph, feed or job; a task's failure names the task; UNAVAILABLE once the
// master is shutting down.
//
// Thread-safety: thread-safe.
#ifndef WEFT_MASTER_MASTER_H_
#define WEFT_MASTER_MASTER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/thread_pool.h"
#include "common/caller.h"
#include "common/confined_root.h"
#include "master/dataset_uploads.h"
#include "master/job_manager.h"
#include "master/job_store.h"
#include "master/master_session.h"
#include "master/worker_cache.h"
#include "master/worker_join.h"
#include "proto/master_service.pb.h"
#include "worker/worker_interface.h"

namespace weft {
namespace master {

struct MasterOptions {
  // The cluster's tasks; must outlive the Master.
  WorkerCacheInterface* workers = nullptr;
  // Job records; null keeps them in memory. Must outlive the Master.
  JobStoreInterface* store = nullptr;
  // Shutdown checkpoints running jobs and leaves them for the next master
  // over the same store (JobManagerOptions::preempt_on_shutdown).
  bool preempt_jobs_on_shutdown = false;
  // Threads for blocking handler work (session steps, device listing).
  int num_threads = 4;
  // Least time between two progress updates of a running job.
  absl::Duration progress_interval = absl::Seconds(1);
  // For interactive sessions (jobs use the defaults).
  MasterSessionOptions session_options;
  // Where jobs' checkpoints are confined (JobManagerOptions::checkpoint_root).
  std::optional<ConfinedRoot> checkpoint_root;
  // Jobs run at once, and jobs that may wait to run
  // (JobManagerOptions::max_running_jobs, max_queued_jobs).
  int max_running_jobs = 4;
  int max_queued_jobs = 256;
  // When a job's step counts as stalled (JobManagerOptions::step_watch).
  StepWatchOptions step_watch;
  // Datasets clients uploaded (UploadDataset; SubmitJob checks a job's
  // upload_id against them). Null: none. Must outlive the Master.
  DatasetUploads* uploads = nullptr;
};

class Master {
 public:
  explicit Master(MasterOptions options);
  // Shutdown().
  ~Master();
  Master(const Master&) = delete;
  Master& operator=(const Master&) = delete;

  void CreateSessionAsync(const Caller& caller, const CreateSessionRequest* request, CreateSessionResponse* response, StatusCallback done);
  void ExtendSessionAsync(const Caller& caller, const ExtendSessionRequest* request, ExtendSessionResponse* response, StatusCallback done);
  void RunStepAsync(const Caller& caller, const RunStepRequest* request, RunStepResponse* response, StatusCallback done);
  void CloseSessionAsync(const Caller& caller, const CloseSessionRequest* request, CloseSessionResponse* response, StatusCallback done);
  // Every device of every task (GetStatus on each, in parallel).
  void ListDevicesAsync(const Caller& caller, const ListDevicesRequest* request, ListDevicesResponse* response, StatusCallback done);
  // No containers named: closes every session and clears every container on
  // every task (admins). Containers named: clears the caller's own of those
  // names on every task, sessions untouched (users). Jobs are not affected.
  // A task that cannot be reached fails the call, named.
  void ResetAsync(const Caller& caller, const ResetRequest* request, ResetResponse* response, StatusCallback done);

  void SubmitJobAsync(const Caller& caller, const SubmitJobRequest* request, SubmitJobResponse* response, StatusCallback done);
  void GetJobAsync(const Caller& caller, const GetJobRequest* request, JobStatus* response, StatusCallback done);
  void ListJobsAsync(const Caller& caller, const ListJobsRequest* request, ListJobsResponse* response, StatusCallback done);
  void CancelJobAsync(const Caller& caller, const CancelJobRequest* request, CancelJobResponse* response, StatusCallback done);
  // The job's owner or an admin; JobManager::Scale's errors.
  void ScaleJobAsync(const Caller& caller, const ScaleJobRequest* request, ScaleJobResponse* response,
                     StatusCallback done);
  // Traces the job's next steps on every task (`weft trace`): the job's
  // owner or an admin; `steps` in 1..100. Answers when they ran, or with
  // what was recorded after a minute (DEADLINE_EXCEEDED when nothing was).
  void TraceJobAsync(const Caller& caller, const TraceJobRequest* request, TraceJobResponse* response, StatusCallback done);
  // A page of the job's checkpoint (master/checkpoint_reader.h). The job's
  // owner or an admin; FAILED_PRECONDITION when it has written none.
  void ReadJobCheckpointAsync(const Caller& caller, const ReadJobCheckpointRequest* request,
                              ReadJobCheckpointResponse* response, StatusCallback done);

  // A worker joins the cluster (master/worker_join.h).
  void RegisterWorkerAsync(const Caller& caller, const RegisterWorkerRequest* request,
                           RegisterWorkerResponse* response, StatusCallback done);

  // For WatchJob, which streams: see JobManager::Watch. Check the caller
  // with AuthorizeJob first.
  JobManager* jobs() { return &jobs_; }
  // MasterOptions::uploads, for UploadDataset (master/grpc_upload_reactor.h).
  DatasetUploads* uploads() const { return options_.uploads; }
  // The cluster's tasks (the monitoring pages probe them).
  WorkerCacheInterface* workers() const { return options_.workers; }
  // OK when `caller` may see and control job `job_id`; NOT_FOUND for an
  // unknown job, PERMISSION_DENIED for someone else's.
  absl::Status AuthorizeJob(const Caller& caller, const std::string& job_id) const;

  // Cancels running jobs and waits for them, aborts running steps, closes
  // every session and waits for handler work in flight. Later calls answer
  // UNAVAILABLE. Idempotent.
  void Shutdown();

 private:
  // Runs `fn` on the pool, or answers UNAVAILABLE when shutting down.
  void Schedule(StatusCallback done, std::function<absl::Status()> fn);
  // The session, when `caller` may use it.
  absl::StatusOr<std::shared_ptr<MasterSession>> FindSession(const Caller& caller, const std::string& handle) const;
  absl::Status CloseAllSessions();

  const MasterOptions options_;
  WorkerJoins joins_;
  JobManager jobs_;

  mutable absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::shared_ptr<MasterSession>> sessions_ ABSL_GUARDED_BY(mu_);
  // Handle -> the user who created it ("" insecure).
  std::map<std::string, std::string> session_owners_ ABSL_GUARDED_BY(mu_);
  // Reset by Shutdown, after which nothing is scheduled.
  std::unique_ptr<ThreadPool> pool_ ABSL_GUARDED_BY(mu_);
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_MASTER_H_
