// `weft worker` and `weft ps`: one task of the cluster (client/daemon_commands.h).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <utility>
#include <vector>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/daemon_commands.h"
#include "client/daemon_setup.h"
#include "client/flags.h"
#include "client/port_file.h"
#include "common/allocator.h"
#include "common/cluster_spec.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/status_macros.h"
#include "graph/device_name.h"
#include "ps/ps_service.h"
#include "runtime/device.h"
#include "worker/master_registration.h"
#include "worker/worker_server.h"

namespace weft {
namespace {

using daemon::Usage;

// A task's flags, checked.
struct TaskFlags {
  ClusterConfig config;
  int64_t intra_op_threads = 1;
  int64_t cpu_devices = 1;
  int64_t inter_op_threads = 0;
  int64_t gpus = -1;
  int64_t drain_seconds = 20;
  std::string port_file;
  std::string listen;
  // --master: where a worker registers (empty: it does not); --advertise:
  // the address it registers (empty: derived from --listen, see
  // AdvertisedAddress).
  std::string master;
  std::string advertise;
};

// A wildcard listen host: the task is reached at one of the machine's
// addresses, not at this one.
bool IsWildcardHost(absl::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::";
}

// --master and --advertise into `t`; returns 0, or the exit code after
// printing why.
int ParseMasterFlags(const Flags& f, const char* job, TaskFlags* t) {
  if (f.Has("master") && std::string(job) != "worker") {
    return Usage(job, "only a worker registers with the master (--master)");
  }
  if (f.Has("advertise") && !f.Has("master")) {
    return Usage(job, "--advertise is the address registered with the master; it needs --master=HOST:PORT");
  }
  if (!f.Has("master")) return 0;
  t->master = f.Get("master");
  if (absl::Status s = CheckHostPort(t->master, "--master"); !s.ok()) return Usage(job, s.message());
  if (f.Has("advertise")) {
    t->advertise = f.Get("advertise");
    if (absl::Status s = CheckHostPort(t->advertise, "--advertise"); !s.ok()) return Usage(job, s.message());
    if (IsWildcardHost(t->advertise.substr(0, t->advertise.rfind(':')))) {
      return Usage(job, absl::StrCat("--advertise='", t->advertise,
                                     "' is a wildcard; name a host the master and the other tasks reach"));
    }
  }
  return 0;
}

// Reads the flags into `t`; returns 0, or the exit code after printing why.
int ParseTaskFlags(const Flags& f, const char* job, TaskFlags* t) {
  if (f.Has("log_level") && !SetLogLevel(f.Get("log_level"))) return Usage(job, "unknown --log_level");
  auto config = daemon::ClusterFrom(f, /*needs_task=*/true);
  if (!config.ok()) return Usage(job, config.status().message());
  t->config = *std::move(config);
  if (t->config.task.job != job) {
    return Usage(job,
                 absl::StrCat("--task names job '", t->config.task.job, "'; `weft ", job, "` runs a ", job, " task"));
  }
  struct IntFlag {
    const char* name;
    int64_t dflt, min, max;
    int64_t* out;
  };
  const IntFlag ints[] = {
      {"intra_op_threads", 1, 0, 1024, &t->intra_op_threads},
      // Virtual CPU devices: what MIRRORED and CENTRAL_STORAGE replicate
      // over on a machine without GPUs.
      {"cpu_devices", 1, 1, 64, &t->cpu_devices},
      // Threads that run a step's independent nodes in parallel; 0 runs
      // each step's nodes on the thread that runs the step.
      {"inter_op_threads", 0, 0, 1024, &t->inter_op_threads},
      // GPUs the task opens (-1: every visible one); a ps task keeps
      // variables on its CPU, so it opens none unless asked.
      {"gpus", std::string(job) == "ps" ? 0 : -1, -1, 64, &t->gpus},
      // After SIGTERM, how long the task waits for the master to checkpoint.
      {"drain_seconds", 20, 0, 3600, &t->drain_seconds},
  };
  for (const IntFlag& flag : ints) {
    auto v = f.GetInt(flag.name, flag.dflt, flag.min, flag.max);
    if (!v.ok()) return Usage(job, v.status().message());
    *flag.out = *v;
  }
  auto port_file = daemon::PortFileFlag(f);
  if (!port_file.ok()) return Usage(job, port_file.status().message());
  t->port_file = *port_file;
  t->listen = f.Get("listen");
  if (t->listen.empty()) {
    if (t->config.cluster.job_size() == 0) {
      return Usage(job, "a task without --cluster or TF_CONFIG needs --listen=HOST:PORT (port 0: any free port, "
                        "reported in --port_file)");
    }
    const std::string own = *TaskAddress(t->config.cluster, t->config.task);
    t->listen = absl::StrCat("0.0.0.0:", own.substr(own.rfind(':') + 1));
  }
  return ParseMasterFlags(f, job, t);
}

// The address registered with the master: --advertise, else the --listen
// host with the port the server bound (`port`; --listen may say 0), or this
// machine's name when --listen's host is a wildcard.
absl::StatusOr<std::string> AdvertisedAddress(const TaskFlags& t, int port) {
  if (!t.advertise.empty()) return t.advertise;
  const std::string host = t.listen.substr(0, t.listen.rfind(':'));
  if (!IsWildcardHost(host)) return absl::StrCat(host, ":", port);
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') {
    return absl::UnavailableError(absl::StrCat("--listen=", t.listen, " names no host to register with the master ",
                                               "and gethostname failed (", std::strerror(errno),
                                               "): give --advertise=HOST:PORT"));
  }
  return absl::StrCat(name, ":", port);
}

// Registers the task with --master from now until the result is destroyed;
// null without --master. The calls present the task's own certificate, so
// that the master can check that the task registers only itself.
std::unique_ptr<worker::MasterRegistration> StartRegistration(const TaskFlags& t, const std::string& task,
                                                              const std::string& advertised,
                                                              const TransportSecurity& security,
                                                              const std::shared_ptr<spdlog::logger>& log) {
  if (t.master.empty()) return nullptr;
  log->info("registering with the master at {} as {} (advertised {})", t.master, task, advertised);
  worker::MasterRegistrationOptions options;
  options.master = t.master;
  options.task = task;
  options.address = advertised;
  options.credentials = security.ChannelCredentials();
  return worker::MasterRegistration::Start(std::move(options));
}

// The server's options from the flags; every task serves the
// ParameterServer service (shard list, save, restore) beside the
// WorkerService: ps tasks hold the variables of PARAMETER_SERVER jobs,
// workers those of the mirrored strategies, and the master checkpoints both
// through it. Shard paths are relative to the checkpoint root and confined to
// it.
absl::Status TaskServerOptions(const Flags& f, const TaskFlags& t, std::shared_ptr<const TransportSecurity> security,
                               const std::string& checkpoint_root, worker::WorkerServerOptions* opts) {
  opts->security = std::move(security);
  opts->job = t.config.task.job;
  opts->task_index = t.config.task.index;
  opts->listen_address = t.listen;
  opts->cluster = t.config.cluster;
  opts->intra_op_threads = t.intra_op_threads;
  opts->num_cpu_devices = static_cast<int>(t.cpu_devices);
  opts->inter_op_threads = static_cast<int>(t.inter_op_threads);
  opts->max_gpus = static_cast<int>(t.gpus);
  RETURN_IF_ERROR(daemon::TaskQuotas(f, opts));
  // A ps takes part in no collective: it opens no collective socket unless
  // told which port to use.
  if (opts->job == "ps" && !f.Has("collective_port")) opts->collective_sockets = false;
  ps::PsHandlerOptions ps_options;
  ps_options.checkpoint_root = checkpoint_root;
  opts->extra_services.push_back(ps::PsServiceFactory(ps_options));
  return absl::OkStatus();
}

// A preemption: says so in GetStatus, so the master checkpoints the jobs
// running here and releases their graphs, and waits for that at most
// `drain` (the caller stops the server afterwards).
void Drain(worker::WorkerServer* server, absl::Duration drain, int sig, const std::shared_ptr<spdlog::logger>& log) {
  server->worker()->SetDraining();
  const absl::Time drain_start = absl::Now();
  const absl::Time drain_end = drain_start + drain;
  if (server->worker()->NumGraphs() == 0 || drain <= absl::ZeroDuration()) return;
  log->info("signal {}: draining: waiting up to {} s for the master to checkpoint and release {} graph(s)", sig,
            absl::ToInt64Seconds(drain), server->worker()->NumGraphs());
  // Bounded by drain_end; the master's heartbeat does the work. Graphs that
  // no master polls for (the master is gone, or whoever registered them
  // never meant to release them) are not worth the wait: the drain ends
  // kDrainQuietPeriod after the last GetStatus.
  constexpr absl::Duration kDrainQuietPeriod = absl::Seconds(3);
  auto master_polls = [&] {
    return absl::Now() - std::max(drain_start, server->worker()->last_status_call()) < kDrainQuietPeriod;
  };
  while (server->worker()->NumGraphs() > 0 && absl::Now() < drain_end && master_polls()) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  if (server->worker()->NumGraphs() > 0 && !master_polls()) {
    log->info("signal {}: no master has polled this task for {}: stopping with {} graph(s) registered", sig,
              absl::FormatDuration(kDrainQuietPeriod), server->worker()->NumGraphs());
  }
}

// Allocator gauges, read at each scrape: bytes of live buffers and bytes
// kept for reuse, per allocator (the CPU devices share one: "cpu").
void RegisterAllocatorMetrics(worker::Worker* w) {
  auto stats = [w](bool cached) {
    std::vector<std::pair<metrics::Labels, double>> out;
    std::set<const Allocator*> seen;
    for (Device* d : w->devices()) {
      Allocator* a = d->allocator();
      if (!seen.insert(a).second) continue;
      const Allocator::Stats st = a->GetStats();
      out.push_back({{a == CpuAllocator() ? "cpu" : d->name()},
                     static_cast<double>(cached ? st.bytes_cached : st.bytes_in_use)});
    }
    return out;
  };
  metrics::Registry& r = metrics::Registry::Default();
  r.AddGaugeCallback("weft_allocator_bytes_in_use", "Bytes of live tensor buffers, per allocator.", {"allocator"},
                     [stats] { return stats(false); });
  r.AddGaugeCallback("weft_allocator_bytes_cached", "Bytes of freed buffers kept for reuse, per allocator.",
                     {"allocator"}, [stats] { return stats(true); });
}

}  // namespace

int RunTaskCommand(int argc, char** argv, const char* job) {
  auto f = Flags::Parse(argc, argv, 2,
                        {"dataset_cache", "task", "cluster", "listen", "port_file", "intra_op_threads",
                         "inter_op_threads", "cpu_devices", "gpus", "log_level", "drain_seconds", "ca", "cert", "key",
                         "health_port", "checkpoint_root", "data_root", "memory_limit", "max_message_bytes",
                         "max_sessions", "max_graphs", "max_graphs_per_session", "max_iterations",
                         "max_queued_steps", "max_live_steps", "max_containers", "max_pending_collective_bytes",
                         "shared_memory", "collective_transport", "collective_port", "metrics_port", "metrics_host",
                         "metrics_port_file", "master", "advertise"},
                        {"insecure", "metrics_plaintext"});
  if (!f.ok()) return Usage(job, f.status().message());
  TaskFlags t;
  if (int rc = ParseTaskFlags(*f, job, &t); rc != 0) return rc;
  SetTaskId(absl::StrCat(t.config.task.index));  // loggers are named by role: "worker:1"
  auto log = Logger(job);
  if (absl::Status s = daemon::ApplyMemoryFlags(*f, job); !s.ok()) return Usage(job, s.message());
  auto security = daemon::DaemonSecurity(*f, job, TaskName(t.config.task.job, t.config.task.index));
  if (!security.ok()) {
    log->error("cannot start: {}", std::string(security.status().message()));
    return 1;
  }
  auto checkpoint_root = daemon::ConfineFiles(*f);
  if (!checkpoint_root.ok()) {
    log->error("cannot start: {}", std::string(checkpoint_root.status().message()));
    return 1;
  }
  BlockTerminationSignals();
  worker::WorkerServerOptions opts;
  if (absl::Status s = TaskServerOptions(*f, t, *security, *checkpoint_root, &opts); !s.ok()) {
    return Usage(job, s.message());
  }
  auto datasets = daemon::OpenDatasetCache(*f);
  if (!datasets.ok()) {
    log->error("cannot start: {}", std::string(datasets.status().message()));
    return 1;
  }
  opts.datasets = datasets->get();
  auto server = worker::StartWorkerServer(opts);
  if (!server.ok()) {
    log->error("cannot start: {}", std::string(server.status().message()));
    return 1;
  }
  log->info("{} serving on {} (cluster {})", (*server)->task(), (*server)->address(),
            t.config.cluster.job_size() > 0 ? ClusterToFlag(t.config.cluster) : "to come from the master");
  RegisterAllocatorMetrics((*server)->worker());
  auto health = daemon::HealthServer::Start(*f);
  absl::Status started = health.status();
  absl::StatusOr<std::unique_ptr<MonitoringServer>> monitoring = std::unique_ptr<MonitoringServer>();
  if (started.ok()) monitoring = daemon::StartMonitoring(*f, job);
  if (started.ok()) started = monitoring.status();
  absl::StatusOr<std::string> advertised = std::string();
  if (started.ok() && !t.master.empty()) advertised = AdvertisedAddress(t, (*server)->port());
  if (started.ok()) started = advertised.status();
  // Last: whoever reads the port may call at once.
  if (started.ok() && !t.port_file.empty()) started = WritePortFile(t.port_file, (*server)->port());
  if (!started.ok()) {
    log->error("cannot start: {}", std::string(started.message()));
    if (health.ok() && *health != nullptr) (*health)->Stop();
    (*server)->Shutdown();
    return 1;
  }
  auto registration = StartRegistration(t, (*server)->task(), *advertised, **security, log);
  const int sig = WaitForTerminationSignal();
  // A task on its way out stops saying that it is there before it drains.
  registration.reset();
  if (*health != nullptr) (*health)->Stop();
  Drain(server->get(), absl::Seconds(t.drain_seconds), sig, log);
  log->info("signal {}: stopping", sig);
  (*server)->Shutdown();
  log->info("stopped");
  return 0;
}

}  // namespace weft
