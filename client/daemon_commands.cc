#include "client/daemon_commands.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/daemon_setup.h"
#include "client/flags.h"
#include "client/port_file.h"
#include "common/cluster_spec.h"
#include "common/confined_root.h"
#include "common/grpc_security.h"
#include "runtime/data/dataset.h"
#include "runtime/data/uploaded_dataset.h"
#include "common/grpc_util.h"
#include "common/memory_budget.h"
#include "common/allocator.h"
#include "common/token_table.h"
#include "grpcpp/health_check_service_interface.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "ps/ps_handler.h"
#include "worker/worker_server.h"

namespace weft {
namespace daemon {

int Usage(const char* cmd, absl::string_view msg) {
  std::fprintf(stderr, "weft %s: %s\n", cmd, std::string(msg).c_str());
  return 2;
}

// The cluster and this task, from flags or TF_CONFIG.
absl::StatusOr<ClusterConfig> ClusterFrom(const Flags& f, bool needs_task) {
  ClusterConfig config;
  if (f.Has("cluster")) {
    auto cluster = ParseClusterFlag(f.Get("cluster"));
    if (!cluster.ok()) return cluster.status();
    config.cluster = *std::move(cluster);
    if (f.Has("task")) {
      auto task = ParseTaskFlag(f.Get("task"));
      if (!task.ok()) return task.status();
      config.task = *task;
    }
  } else if (const char* tf = std::getenv("TF_CONFIG"); tf != nullptr && *tf != '\0') {
    auto parsed = ParseTfConfig(tf);
    if (!parsed.ok()) return parsed.status();
    config = *std::move(parsed);
    if (f.Has("task")) {
      auto task = ParseTaskFlag(f.Get("task"));
      if (!task.ok()) return task.status();
      config.task = *task;
    }
  } else if (needs_task && f.Has("task")) {
    // A task may start knowing only itself: the master sends the cluster
    // with the first graph it registers here.
    auto task = ParseTaskFlag(f.Get("task"));
    if (!task.ok()) return task.status();
    config.task = *task;
    return config;
  } else {
    return absl::InvalidArgumentError(
        needs_task ? "no cluster: pass --cluster=JOB=HOST:PORT,...;JOB=..., set TF_CONFIG, or pass --task=JOB:INDEX "
                     "with --listen=HOST:PORT and let the master send the cluster"
                   : "no cluster: pass --cluster=JOB=HOST:PORT,...;JOB=... or set TF_CONFIG");
  }
  if (needs_task) {
    if (config.task.job.empty()) return absl::InvalidArgumentError("no task: pass --task=JOB:INDEX");
    auto addr = TaskAddress(config.cluster, config.task);
    if (!addr.ok()) return addr.status();
  }
  return config;
}

// --port_file=PATH: where the daemon reports the port it bound (for port 0).
// Empty when not given; an error when given empty.
absl::StatusOr<std::string> PortFileFlag(const Flags& f) {
  if (f.Has("port_file") && f.Get("port_file").empty()) {
    return absl::InvalidArgumentError("--port_file needs a path");
  }
  return f.Get("port_file");
}

// The daemon's transport security from --ca/--cert/--key, or plaintext with
// --insecure (warned about once). `identity` is the name its certificate
// must carry.
absl::StatusOr<std::shared_ptr<const TransportSecurity>> DaemonSecurity(const Flags& f, const std::string& role,
                                                                        const std::string& identity) {
  const bool any_file = f.Has("ca") || f.Has("cert") || f.Has("key");
  if (f.GetBool("insecure")) {
    if (any_file) return absl::InvalidArgumentError("--insecure goes without --ca, --cert and --key");
    WarnInsecureOnce(role);
    return TransportSecurity::Insecure();
  }
  TlsFiles files;
  files.ca = f.Get("ca");
  files.cert = f.Get("cert");
  files.key = f.Get("key");
  return TransportSecurity::ForDaemon(files, identity);
}

absl::StatusOr<std::unique_ptr<MonitoringServer>> StartMonitoring(const Flags& f, const std::string& role,
                                                                  std::map<std::string, HttpHandler> pages) {
  if (!f.Has("metrics_port")) {
    for (const char* other : {"metrics_host", "metrics_port_file", "metrics_plaintext"}) {
      if (f.Has(other)) return absl::InvalidArgumentError(absl::StrCat("--", other, " needs --metrics_port"));
    }
    return std::unique_ptr<MonitoringServer>();
  }
  auto port = f.GetInt("metrics_port", 0, 0, 65535);
  if (!port.ok()) return port.status();
  auto port_file = f.Has("metrics_port_file") ? absl::StatusOr<std::string>(f.Get("metrics_port_file"))
                                              : absl::StatusOr<std::string>("");
  if (f.Has("metrics_port_file") && port_file->empty()) {
    return absl::InvalidArgumentError("--metrics_port_file is empty");
  }
  MonitoringOptions o;
  o.host = f.Get("metrics_host", "0.0.0.0");
  o.port = *port;
  o.plaintext = f.GetBool("metrics_plaintext");
  if (!f.GetBool("insecure")) {
    o.ca_file = f.Get("ca");
    o.cert_file = f.Get("cert");
    o.key_file = f.Get("key");
  }
  auto server = MonitoringServer::Start(o, std::move(pages));
  if (!server.ok()) return server.status();
  if (!port_file->empty()) RETURN_IF_ERROR(WritePortFile(*port_file, (*server)->port()));
  Logger(role)->info("metrics on {}/metrics", (*server)->url());
  return server;
}

HealthServer::~HealthServer() { Stop(); }

absl::StatusOr<std::unique_ptr<HealthServer>> HealthServer::Start(const Flags& f) {
  auto port = f.GetInt("health_port", 0, 0, 65535);
  if (!port.ok()) return port.status();
  if (*port == 0) return std::unique_ptr<HealthServer>();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  ConfigureServer(&builder);
  int bound = 0;
  builder.AddListeningPort(absl::StrCat("0.0.0.0:", *port), grpc::InsecureServerCredentials(), &bound);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound == 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve health checks on port ", *port));
  }
  server->GetHealthCheckService()->SetServingStatus(true);
  return std::unique_ptr<HealthServer>(new HealthServer(std::move(server)));
}

void HealthServer::Stop() {
  if (server_ == nullptr) return;
  server_->GetHealthCheckService()->SetServingStatus(false);
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  server_.reset();
}

// --checkpoint_root (default ps::kDefaultCheckpointRoot), created 0700 when
// missing and opened once here, so that a daemon that could not use it does
// not start. The same directory (a shared volume) for the master and every
// task: checkpoint paths are relative to it.
absl::StatusOr<std::string> CheckpointRoot(const Flags& f) {
  if (f.Has("checkpoint_root") && f.Get("checkpoint_root").empty()) {
    return absl::InvalidArgumentError("--checkpoint_root needs a directory");
  }
  const std::string root = f.Get("checkpoint_root", ps::kDefaultCheckpointRoot);
  absl::StatusOr<ConfinedRoot> opened = ConfinedRoot::Open(root, /*create=*/true);
  if (!opened.ok()) return Annotate(opened.status(), "--checkpoint_root");
  return opened->path();
}

// --data_root (default /usr/share/datasets): every dataset file a job
// reads on this daemon must lie under it (runtime/data/dataset.h).
absl::Status ConfineDatasets(const Flags& f) {
  if (f.Has("data_root") && f.Get("data_root").empty()) {
    return absl::InvalidArgumentError("--data_root needs a directory");
  }
  absl::StatusOr<ConfinedRoot> root = ConfinedRoot::Open(f.Get("data_root", kDefaultDataRoot), /*create=*/false);
  if (!root.ok()) {
    // A root named on the command line must exist; without the default
    // (no dataset packages here) the daemon serves, and refuses every
    // dataset, saying why.
    if (f.Has("data_root")) return Annotate(root.status(), "--data_root");
    Logger("worker")->warn("no data root ({}): this daemon reads no datasets; pass --data_root=DIR",
                           std::string(root.status().message()));
    data::SetDataRoot(Annotate(root.status(), "--data_root"));
    return absl::OkStatus();
  }
  data::SetDataRoot(*root);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<worker::DatasetCache>> OpenDatasetCache(const Flags& f) {
  if (f.Has("dataset_cache") && f.Get("dataset_cache").empty()) {
    return absl::InvalidArgumentError("--dataset_cache needs a directory");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<worker::DatasetCache> cache,
                   worker::DatasetCache::Open(f.Get("dataset_cache", kDefaultDatasetCache)));
  data::SetUploadRoot(cache->root());
  return cache;
}

absl::Status UploadFlags(const Flags& f, master::DatasetUploadsOptions* opts) {
  if (f.Has("upload_root") && f.Get("upload_root").empty()) {
    return absl::InvalidArgumentError("--upload_root needs a directory");
  }
  opts->root = f.Get("upload_root", kDefaultUploadRoot);
  for (auto [flag, out] : {std::pair<const char*, int64_t*>{"max_upload_bytes", &opts->max_upload_bytes},
                           {"upload_quota_bytes", &opts->quota_bytes}}) {
    if (!f.Has(flag)) continue;
    ASSIGN_OR_RETURN(uint64_t bytes, ParseByteSize(f.Get(flag), absl::StrCat("--", flag)));
    if (bytes == 0 || bytes > static_cast<uint64_t>(INT64_MAX)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be 1 byte to 2^63-1 bytes"));
    }
    *out = static_cast<int64_t>(bytes);
  }
  return absl::OkStatus();
}

// Both roots of a daemon: confines datasets to --data_root and returns the
// opened --checkpoint_root.
absl::StatusOr<std::string> ConfineFiles(const Flags& f) {
  RETURN_IF_ERROR(ConfineDatasets(f));
  return CheckpointRoot(f);
}

// The cluster without the master's own job: the tasks the master drives.
ClusterDef WithoutJob(const ClusterDef& cluster, const std::string& job) {
  ClusterDef out;
  for (const JobDef& j : cluster.job()) {
    if (j.name() != job) *out.add_job() = j;
  }
  return out;
}

// --memory_limit (bytes, or with K/M/G/T) and --max_message_bytes, shared by
// every daemon: the memory budget (else the cgroup's limit, else physical
// memory; common/memory_budget.h) caps tensors, graphs' declared sizes and
// the CPU allocator, and the message limit is applied to every server and
// channel made afterwards. Called before anything serves.
absl::Status ApplyMemoryFlags(const Flags& f, const std::string& role) {
  std::optional<uint64_t> flag_bytes;
  if (f.Has("memory_limit")) {
    ASSIGN_OR_RETURN(uint64_t bytes, ParseByteSize(f.Get("memory_limit"), "--memory_limit"));
    flag_bytes = bytes;
  }
  const MemoryBudget budget = DetectMemoryBudget(flag_bytes);
  for (const std::string& why : budget.ignored) Logger(role)->warn("memory budget: ignored {}", why);
  SetMemoryBudget(budget.bytes);
  if (auto* cpu = dynamic_cast<CachingAllocator*>(CpuAllocator()); cpu != nullptr) cpu->SetLimit(budget.bytes);
  Logger(role)->info("memory budget {} bytes ({})", budget.bytes, budget.source);
  if (f.Has("max_message_bytes")) {
    ASSIGN_OR_RETURN(uint64_t bytes, ParseByteSize(f.Get("max_message_bytes"), "--max_message_bytes"));
    RETURN_IF_ERROR(SetMaxMessageBytes(bytes > INT64_MAX ? INT64_MAX : static_cast<int64_t>(bytes)));
  }
  return absl::OkStatus();
}

// A quota flag: a positive count, `dflt` when not given.
absl::Status QuotaFlag(const Flags& f, const char* name, int dflt, int* out) {
  ASSIGN_OR_RETURN(*out, f.GetInt(name, dflt, 1, 1 << 30));
  return absl::OkStatus();
}

// The worker's and ps's quotas from their flags.
absl::Status TaskQuotas(const Flags& f, worker::WorkerServerOptions* opts) {
  RETURN_IF_ERROR(QuotaFlag(f, "max_sessions", opts->limits.max_sessions, &opts->limits.max_sessions));
  RETURN_IF_ERROR(QuotaFlag(f, "max_graphs", opts->limits.max_graphs, &opts->limits.max_graphs));
  RETURN_IF_ERROR(QuotaFlag(f, "max_graphs_per_session", opts->limits.max_graphs_per_session,
                            &opts->limits.max_graphs_per_session));
  RETURN_IF_ERROR(QuotaFlag(f, "max_iterations", opts->limits.max_iterations, &opts->limits.max_iterations));
  RETURN_IF_ERROR(
      QuotaFlag(f, "max_queued_steps", opts->limits.max_queued_steps, &opts->limits.max_queued_steps));
  RETURN_IF_ERROR(QuotaFlag(f, "max_containers", opts->limits.max_containers, &opts->limits.max_containers));
  RETURN_IF_ERROR(QuotaFlag(f, "max_live_steps", opts->rendezvous_limits.max_steps,
                            &opts->rendezvous_limits.max_steps));
  if (f.Has("max_pending_collective_bytes")) {
    ASSIGN_OR_RETURN(uint64_t bytes,
                     ParseByteSize(f.Get("max_pending_collective_bytes"), "--max_pending_collective_bytes"));
    opts->max_pending_collective_bytes = bytes > SIZE_MAX ? SIZE_MAX : static_cast<size_t>(bytes);
  }
  const std::string shm = f.Get("shared_memory", "true");
  if (shm != "true" && shm != "false") {
    return absl::InvalidArgumentError(absl::StrCat("--shared_memory must be true or false, not '", shm, "'"));
  }
  opts->shared_memory = shm == "true";
  const std::string transport = f.Get("collective_transport", "socket");
  if (transport != "socket" && transport != "grpc") {
    return absl::InvalidArgumentError(
        absl::StrCat("--collective_transport must be socket or grpc, not '", transport, "'"));
  }
  opts->collective_sockets = transport == "socket";
  ASSIGN_OR_RETURN(opts->collective_port, f.GetInt("collective_port", 0, 0, 65535));
  return absl::OkStatus();
}


}  // namespace daemon

void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForTerminationSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  return sig;
}
}  // namespace weft
