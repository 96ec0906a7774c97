// MasterServer: the master daemon's gRPC server.
//
// Start opens the job store under `state_dir` when one is given, builds
// the worker cache (unless the options bring one), the Master and its
// GrpcMasterService, enables the standard health service
// (grpc.health.v1, for Kubernetes probes) and listens on `address`; port 0
// picks a free port, reported by port(). Shutdown cancels running jobs,
// stops the server (calls still running after `shutdown_deadline` are
// cancelled), then shuts the Master down and joins its threads.
//
// Thread-safety: thread-safe.
#ifndef WEFT_MASTER_MASTER_SERVER_H_
#define WEFT_MASTER_MASTER_SERVER_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "common/grpc_security.h"
#include "common/token_table.h"
#include "master/dataset_uploads.h"
#include "master/grpc_master_service.h"
#include "master/master.h"
#include "master/sqlite_job_store.h"
#include "master/worker_cache.h"
#include "proto/cluster.pb.h"

namespace weft {
namespace master {

struct MasterServerOptions {
  // "host:port" to listen on; port 0 picks a free one.
  std::string address = "0.0.0.0:0";
  // mTLS: the master's certificate (CN=master) serves clients and is
  // presented to every task. Null: insecure (tests, --insecure).
  std::shared_ptr<const TransportSecurity> security;
  // Bearer tokens admitted beside user certificates (may be null).
  std::shared_ptr<TokenTable> tokens;
  // The tasks to drive, and how to reach them; an empty factory means
  // GrpcWorkerFactory(). Ignored when `workers` is set.
  ClusterDef cluster;
  WorkerFactory worker_factory;
  // A ready-made worker cache (tests: in-process workers); must outlive the
  // server.
  WorkerCacheInterface* workers = nullptr;
  // Job records; null keeps them in memory. Must outlive the server.
  JobStoreInterface* store = nullptr;
  // When set, the server keeps the job records in a SqliteJobStore there
  // (`<state_dir>/jobs.db`) instead; not together with `store`.
  std::string state_dir;
  // The directory jobs' checkpoints are confined to (`weft master
  // --checkpoint_root`; the tasks must be given the same one), created 0700
  // when missing: checkpoint.dir and resume_from are relative to it or
  // absolute inside it (master/checkpointer.h). Empty: none, absolute
  // checkpoint directories used as given (tests; the daemon always sets one).
  std::string checkpoint_root;
  int num_threads = 4;
  absl::Duration progress_interval = absl::Seconds(1);
  // `weft master --max_running_jobs` and `--max_queued_jobs`
  // (JobManagerOptions).
  int max_running_jobs = 4;
  int max_queued_jobs = 256;
  // `--stall_after_seconds` and `--stall_factor` (master/step_watch.h).
  StepWatchOptions step_watch;
  // Uploaded datasets (`--upload_root`, `--max_upload_bytes`,
  // `--upload_quota_bytes`; master/dataset_uploads.h). An empty root: the
  // master takes no uploads. A root makes it this process's upload root
  // (runtime/data/uploaded_dataset.h).
  DatasetUploadsOptions uploads;
  // How long Shutdown lets calls in flight finish before cancelling them.
  absl::Duration shutdown_deadline = absl::Seconds(5);
};

// Clients of remote tasks: a GrpcRemoteWorker per task, on one shared
// channel per address over `credentials` (null: plaintext); `timeout` is the
// deadline of its control calls.
WorkerFactory GrpcWorkerFactory(absl::Duration timeout = absl::Seconds(60),
                                std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

class MasterServer {
 public:
  // INVALID_ARGUMENT for a bad cluster; UNAVAILABLE
  // when the address cannot be bound; the SqliteJobStore's error, naming the
  // database, when the state directory cannot be opened or read; the error
  // naming the checkpoint root when it cannot be created or opened.
  static absl::StatusOr<std::unique_ptr<MasterServer>> Start(MasterServerOptions options);
  // Shutdown().
  ~MasterServer();

  // The port bound (the one asked for, or the one picked for port 0).
  int port() const { return port_; }
  // "host:port" with the bound port, for clients on this machine.
  std::string address() const;
  Master* master() { return master_.get(); }

  // Idempotent; see the file comment.
  void Shutdown();
  // Blocks until Shutdown has finished (e.g. from a signal-watching thread).
  void Wait();

 private:
  MasterServer() = default;

  std::string host_;
  int port_ = 0;
  absl::Duration shutdown_deadline_;
  std::unique_ptr<WorkerCache> own_workers_;
  // Opened from state_dir; declared before master_ so that it outlives the
  // Master's JobManager, which writes to it until it is destroyed.
  std::unique_ptr<SqliteJobStore> own_store_;
  std::unique_ptr<DatasetUploads> uploads_;  // outlives master_, which borrows it
  std::unique_ptr<Master> master_;
  std::unique_ptr<GrpcMasterService> service_;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Notification done_;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_MASTER_SERVER_H_
