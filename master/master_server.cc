#include "master/master_server.h"

#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "runtime/data/uploaded_dataset.h"
#include "common/status_macros.h"
#include "grpcpp/health_check_service_interface.h"
#include "worker/grpc_channel_cache.h"
#include "worker/grpc_remote_worker.h"

namespace weft {
namespace master {

WorkerFactory GrpcWorkerFactory(absl::Duration timeout, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  auto channels = std::make_shared<worker::ChannelCache>(std::move(credentials));
  return [channels, timeout](const std::string& task, const std::string& address) {
    return std::make_unique<worker::GrpcRemoteWorker>(task, channels->Get(address), timeout);
  };
}

absl::StatusOr<std::unique_ptr<MasterServer>> MasterServer::Start(MasterServerOptions options) {
  const size_t colon = options.address.rfind(':');
  if (colon == std::string::npos || colon + 1 == options.address.size()) {
    return absl::InvalidArgumentError(absl::StrCat("master address '", options.address, "' is not host:port"));
  }
  std::unique_ptr<MasterServer> s(new MasterServer());
  const std::shared_ptr<const TransportSecurity> security =
      options.security != nullptr ? options.security : TransportSecurity::Insecure();
  s->host_ = options.address.substr(0, colon);
  s->shutdown_deadline_ = options.shutdown_deadline;
  JobStoreInterface* store = options.store;
  if (!options.state_dir.empty()) {
    if (store != nullptr) return absl::InvalidArgumentError("the master takes a job store or a state_dir, not both");
    ASSIGN_OR_RETURN(s->own_store_, SqliteJobStore::Open(options.state_dir));
    // Refuse a store that cannot be read rather than start empty and
    // overwrite it.
    ASSIGN_OR_RETURN(const std::vector<JobRecord> records, s->own_store_->LoadAll());
    Logger("master")->info("jobs kept in {} ({} found)", s->own_store_->path(), records.size());
    store = s->own_store_.get();
  }
  WorkerCacheInterface* workers = options.workers;
  if (workers == nullptr) {
    WorkerFactory factory = options.worker_factory
                                ? options.worker_factory
                                : GrpcWorkerFactory(absl::Seconds(60), security->ChannelCredentials());
    ASSIGN_OR_RETURN(s->own_workers_, WorkerCache::Create(options.cluster, std::move(factory)));
    workers = s->own_workers_.get();
  }
  MasterOptions mo;
  if (!options.checkpoint_root.empty()) {
    absl::StatusOr<ConfinedRoot> root = ConfinedRoot::Open(options.checkpoint_root, /*create=*/true);
    if (!root.ok()) return Annotate(root.status(), "the checkpoint root");
    Logger("master")->info("checkpoints confined to {}", root->path());
    mo.checkpoint_root = *std::move(root);
  }
  mo.workers = workers;
  mo.store = store;
  // With a durable store, a stopping master (SIGTERM: a preemption or an
  // upgrade) checkpoints its running jobs for its successor to resume.
  mo.preempt_jobs_on_shutdown = !options.state_dir.empty();
  mo.num_threads = options.num_threads;
  mo.progress_interval = options.progress_interval;
  mo.max_running_jobs = options.max_running_jobs;
  mo.max_queued_jobs = options.max_queued_jobs;
  mo.step_watch = options.step_watch;
  if (!options.uploads.root.empty()) {
    ASSIGN_OR_RETURN(s->uploads_, DatasetUploads::Open(options.uploads));
    // The master counts an uploaded dataset's examples from its own copy.
    data::SetUploadRoot(s->uploads_->root());
    mo.uploads = s->uploads_.get();
  }
  s->master_ = std::make_unique<Master>(std::move(mo));
  s->service_ = std::make_unique<GrpcMasterService>(s->master_.get(), security, options.tokens);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  ConfigureServer(&builder);
  // Users may come with a token instead of a certificate: request one,
  // verify it when offered, and authenticate each call (GrpcMasterService).
  builder.AddListeningPort(options.address, security->ServerCredentials(/*require_client_certificate=*/false),
                           &s->port_);
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    s->master_->Shutdown();
    return absl::UnavailableError(absl::StrCat("the master cannot listen on ", options.address));
  }
  Logger("master")->info("master listening on {} ({} task(s), {})", s->address(), workers->ListTasks().size(),
                         security->insecure() ? "insecure"
                                              : (options.tokens != nullptr ? "mTLS, certificates or tokens"
                                                                            : "mTLS, certificates"));
  return s;
}

MasterServer::~MasterServer() { Shutdown(); }

std::string MasterServer::address() const {
  const std::string host = host_.empty() || host_ == "0.0.0.0" || host_ == "[::]" ? "localhost" : host_;
  return absl::StrCat(host, ":", port_);
}

void MasterServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  if (server_ != nullptr) {
    // Jobs first: their end closes the WatchJob streams, which would
    // otherwise hold the server open until the deadline.
    master_->jobs()->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(shutdown_deadline_));
    master_->Shutdown();
    server_->Wait();
    Logger("master")->info("master stopped");
  }
  done_.Notify();
}

void MasterServer::Wait() { done_.WaitForNotification(); }

}  // namespace master
}  // namespace weft
