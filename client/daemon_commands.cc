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
#include "client/flags.h"
#include "client/port_file.h"
#include "common/cluster_spec.h"
#include "common/confined_root.h"
#include "common/grpc_security.h"
#include "runtime/data/dataset.h"
#include "common/grpc_util.h"
#include "common/memory_budget.h"
#include "common/allocator.h"
#include "common/token_table.h"
#include "graph/device_name.h"
#include "grpcpp/health_check_service_interface.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "master/master_server.h"
#include "ps/ps_service.h"
#include "worker/worker_server.h"

namespace weft {
namespace {

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

// A plaintext server holding only the standard health service, for probes
// that cannot speak mTLS (Kubernetes' gRPC probes). Null for port 0.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartHealthServer(const Flags& f) {
  auto port = f.GetInt("health_port", 0, 0, 65535);
  if (!port.ok()) return port.status();
  if (*port == 0) return std::unique_ptr<grpc::Server>();
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
  return server;
}

void StopHealthServer(grpc::Server* server) {
  if (server == nullptr) return;
  server->GetHealthCheckService()->SetServingStatus(false);
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
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
  RETURN_IF_ERROR(QuotaFlag(f, "max_live_steps", opts->rendezvous_limits.max_steps,
                            &opts->rendezvous_limits.max_steps));
  if (f.Has("max_pending_collective_bytes")) {
    ASSIGN_OR_RETURN(uint64_t bytes,
                     ParseByteSize(f.Get("max_pending_collective_bytes"), "--max_pending_collective_bytes"));
    opts->max_pending_collective_bytes = bytes > SIZE_MAX ? SIZE_MAX : static_cast<size_t>(bytes);
  }
  return absl::OkStatus();
}

}  // namespace

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

int RunTaskCommand(int argc, char** argv, const char* job) {
  auto f = Flags::Parse(argc, argv, 2,
                        {"task", "cluster", "listen", "port_file", "intra_op_threads", "inter_op_threads",
                         "cpu_devices", "gpus", "log_level", "drain_seconds", "ca", "cert", "key", "health_port",
                         "checkpoint_root", "data_root", "memory_limit", "max_message_bytes", "max_sessions",
                         "max_graphs", "max_graphs_per_session", "max_iterations", "max_live_steps",
                         "max_pending_collective_bytes"},
                        {"insecure"});
  if (!f.ok()) return Usage(job, f.status().message());
  if (f->Has("log_level") && !SetLogLevel(f->Get("log_level"))) return Usage(job, "unknown --log_level");
  auto config = ClusterFrom(*f, /*needs_task=*/true);
  if (!config.ok()) return Usage(job, config.status().message());
  if (config->task.job != job) {
    return Usage(job, absl::StrCat("--task names job '", config->task.job, "'; `weft ", job, "` runs a ", job, " task"));
  }
  auto threads = f->GetInt("intra_op_threads", 1, 0, 1024);
  if (!threads.ok()) return Usage(job, threads.status().message());
  // Virtual CPU devices: what MIRRORED and CENTRAL_STORAGE replicate over
  // on a machine without GPUs.
  auto cpus = f->GetInt("cpu_devices", 1, 1, 64);
  if (!cpus.ok()) return Usage(job, cpus.status().message());
  // Threads that run a step's independent nodes in parallel; 0 runs each
  // step's nodes on the thread that runs the step.
  auto inter = f->GetInt("inter_op_threads", 2, 0, 1024);
  if (!inter.ok()) return Usage(job, inter.status().message());
  // GPUs the task opens (-1: every visible one); a ps task keeps variables
  // on its CPU, so it opens none unless asked.
  auto gpus = f->GetInt("gpus", std::string(job) == "ps" ? 0 : -1, -1, 64);
  if (!gpus.ok()) return Usage(job, gpus.status().message());
  // After SIGTERM, how long the task waits for the master to checkpoint.
  auto drain = f->GetInt("drain_seconds", 20, 0, 3600);
  if (!drain.ok()) return Usage(job, drain.status().message());
  auto port_file = PortFileFlag(*f);
  if (!port_file.ok()) return Usage(job, port_file.status().message());
  std::string listen = f->Get("listen");
  if (listen.empty()) {
    if (config->cluster.job_size() == 0) {
      return Usage(job, "a task without --cluster or TF_CONFIG needs --listen=HOST:PORT (port 0: any free port, "
                        "reported in --port_file)");
    }
    const std::string own = *TaskAddress(config->cluster, config->task);
    listen = absl::StrCat("0.0.0.0:", own.substr(own.rfind(':') + 1));
  }

  SetTaskId(absl::StrCat(config->task.index));  // loggers are named by role: "worker:1"
  auto log = Logger(job);
  if (absl::Status s = ApplyMemoryFlags(*f, job); !s.ok()) return Usage(job, s.message());
  auto security = DaemonSecurity(*f, job, TaskName(config->task.job, config->task.index));
  if (!security.ok()) {
    log->error("cannot start: {}", std::string(security.status().message()));
    return 1;
  }
  auto checkpoint_root = ConfineFiles(*f);
  if (!checkpoint_root.ok()) {
    log->error("cannot start: {}", std::string(checkpoint_root.status().message()));
    return 1;
  }
  BlockTerminationSignals();
  worker::WorkerServerOptions opts;
  opts.security = *security;
  opts.job = config->task.job;
  opts.task_index = config->task.index;
  opts.listen_address = listen;
  opts.cluster = config->cluster;
  opts.intra_op_threads = *threads;
  opts.num_cpu_devices = static_cast<int>(*cpus);
  opts.inter_op_threads = static_cast<int>(*inter);
  opts.max_gpus = static_cast<int>(*gpus);
  if (absl::Status s = TaskQuotas(*f, &opts); !s.ok()) return Usage(job, s.message());
  // Every task serves the ParameterServer service (shard list, save,
  // restore) beside the WorkerService: ps tasks hold the variables of
  // PARAMETER_SERVER jobs, workers those of the mirrored strategies, and the
  // master checkpoints both through it.
  // Shard paths are relative to the checkpoint root and confined to it.
  ps::PsHandlerOptions ps_options;
  ps_options.checkpoint_root = *checkpoint_root;
  opts.extra_services.push_back(ps::PsServiceFactory(ps_options));
  auto server = worker::StartWorkerServer(opts);
  if (!server.ok()) {
    log->error("cannot start: {}", std::string(server.status().message()));
    return 1;
  }
  log->info("{} serving on {} (cluster {})", (*server)->task(), (*server)->address(),
            config->cluster.job_size() > 0 ? ClusterToFlag(config->cluster) : "to come from the master");
  auto health = StartHealthServer(*f);
  if (!health.ok()) {
    log->error("cannot start: {}", std::string(health.status().message()));
    (*server)->Shutdown();
    return 1;
  }
  // Last: whoever reads the port may call at once.
  if (!port_file->empty()) {
    if (absl::Status s = WritePortFile(*port_file, (*server)->port()); !s.ok()) {
      log->error("cannot start: {}", std::string(s.message()));
      StopHealthServer(health->get());
      (*server)->Shutdown();
      return 1;
    }
  }
  const int sig = WaitForTerminationSignal();
  StopHealthServer(health->get());
  // A preemption: say so in GetStatus, so the master checkpoints the jobs
  // running here and releases their graphs, then stop (at the latest after
  // --drain_seconds).
  (*server)->worker()->SetDraining();
  const absl::Time drain_start = absl::Now();
  const absl::Time drain_end = drain_start + absl::Seconds(*drain);
  if ((*server)->worker()->NumGraphs() > 0 && *drain > 0) {
    log->info("signal {}: draining: waiting up to {} s for the master to checkpoint and release {} graph(s)", sig,
              *drain, (*server)->worker()->NumGraphs());
    // Bounded by drain_end; the master's heartbeat does the work. Graphs
    // that no master polls for (the master is gone, or whoever registered
    // them never meant to release them) are not worth the wait: the drain
    // ends kDrainQuietPeriod after the last GetStatus.
    constexpr absl::Duration kDrainQuietPeriod = absl::Seconds(3);
    auto master_polls = [&] {
      return absl::Now() - std::max(drain_start, (*server)->worker()->last_status_call()) < kDrainQuietPeriod;
    };
    while ((*server)->worker()->NumGraphs() > 0 && absl::Now() < drain_end && master_polls()) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    if ((*server)->worker()->NumGraphs() > 0 && !master_polls()) {
      log->info("signal {}: no master has polled this task for {}: stopping with {} graph(s) registered", sig,
                absl::FormatDuration(kDrainQuietPeriod), (*server)->worker()->NumGraphs());
    }
  }
  log->info("signal {}: stopping", sig);
  (*server)->Shutdown();
  log->info("stopped");
  return 0;
}

int RunMasterCommand(int argc, char** argv) {
  auto f = Flags::Parse(argc, argv, 2,
                        {"cluster", "task", "listen", "port", "port_file", "log_level", "state_dir", "ca", "cert",
                         "key", "health_port", "auth_tokens_file", "checkpoint_root", "data_root", "memory_limit",
                         "max_message_bytes", "max_running_jobs", "max_queued_jobs"},
                        {"insecure"});
  if (!f.ok()) return Usage("master", f.status().message());
  if (f->Has("state_dir") && f->Get("state_dir").empty()) return Usage("master", "--state_dir needs a directory");
  if (f->Has("log_level") && !SetLogLevel(f->Get("log_level"))) return Usage("master", "unknown --log_level");
  auto config = ClusterFrom(*f, /*needs_task=*/false);
  if (!config.ok()) return Usage("master", config.status().message());
  auto port_file = PortFileFlag(*f);
  if (!port_file.ok()) return Usage("master", port_file.status().message());
  std::string listen = f->Get("listen");
  if (listen.empty()) {
    auto port = f->GetInt("port", -1, 0, 65535);
    if (!port.ok()) return Usage("master", port.status().message());
    if (*port >= 0) {
      listen = absl::StrCat("0.0.0.0:", *port);
    } else if (!config->task.job.empty()) {  // TF_CONFIG names the master's own task
      auto own = TaskAddress(config->cluster, config->task);
      if (!own.ok()) return Usage("master", own.status().message());
      listen = absl::StrCat("0.0.0.0:", own->substr(own->rfind(':') + 1));
    } else {
      return Usage("master", "pass --port=P or --listen=HOST:PORT");
    }
  }
  // Jobs run on a fixed number of threads; past the queue, submits are
  // refused (RESOURCE_EXHAUSTED) rather than piling up.
  master::MasterServerOptions opts;
  // A thread each: bounded well below what a machine can start.
  if (auto running = f->GetInt("max_running_jobs", opts.max_running_jobs, 1, 1024); running.ok()) {
    opts.max_running_jobs = *running;
  } else {
    return Usage("master", running.status().message());
  }
  if (auto queued = f->GetInt("max_queued_jobs", opts.max_queued_jobs, 0, 1 << 20); queued.ok()) {
    opts.max_queued_jobs = *queued;
  } else {
    return Usage("master", queued.status().message());
  }
  SetTaskId("0");
  auto log = Logger("master");
  if (absl::Status s = ApplyMemoryFlags(*f, "master"); !s.ok()) return Usage("master", s.message());
  auto security = DaemonSecurity(*f, "master", "master");
  if (!security.ok()) {
    log->error("cannot start: {}", std::string(security.status().message()));
    return 1;
  }
  opts.security = *security;
  if (f->Has("auth_tokens_file")) {
    if ((*security)->insecure()) return Usage("master", "--auth_tokens_file needs TLS (tokens are never sent in plaintext)");
    auto tokens = TokenTable::Load(f->Get("auth_tokens_file"));
    if (!tokens.ok()) {
      log->error("cannot start: {}", std::string(tokens.status().message()));
      return 1;
    }
    log->info("{} bearer token(s) from {}", (*tokens)->size(), f->Get("auth_tokens_file"));
    opts.tokens = std::shared_ptr<TokenTable>(std::move(*tokens));
  }
  BlockTerminationSignals();
  opts.address = listen;
  opts.cluster = WithoutJob(config->cluster, config->task.job.empty() ? "master" : config->task.job);
  // Without it, jobs are kept in memory and forgotten on restart.
  opts.state_dir = f->Get("state_dir");
  auto checkpoint_root = ConfineFiles(*f);
  if (!checkpoint_root.ok()) {
    log->error("cannot start: {}", std::string(checkpoint_root.status().message()));
    return 1;
  }
  opts.checkpoint_root = *checkpoint_root;
  auto server = master::MasterServer::Start(std::move(opts));
  if (!server.ok()) {
    log->error("cannot start: {}", std::string(server.status().message()));
    return 1;
  }
  log->info("master serving on {}", (*server)->address());
  auto health = StartHealthServer(*f);
  if (!health.ok()) {
    log->error("cannot start: {}", std::string(health.status().message()));
    (*server)->Shutdown();
    return 1;
  }
  if (!port_file->empty()) {
    if (absl::Status s = WritePortFile(*port_file, (*server)->port()); !s.ok()) {
      log->error("cannot start: {}", std::string(s.message()));
      StopHealthServer(health->get());
      (*server)->Shutdown();
      return 1;
    }
  }
  const int sig = WaitForTerminationSignal();
  StopHealthServer(health->get());
  log->info("signal {}: stopping", sig);
  (*server)->Shutdown();
  log->info("stopped");
  return 0;
}

}  // namespace weft
