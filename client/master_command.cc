// `weft master`: the master daemon (client/daemon_commands.h).
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/daemon_commands.h"
#include "client/daemon_setup.h"
#include "client/flags.h"
#include "client/port_file.h"
#include "master/dashboard.h"
#include "common/logging.h"
#include "common/token_table.h"
#include "master/master_server.h"

namespace weft {
namespace {

using daemon::Usage;

// The address to listen on: --listen, else --port, else the master's own
// task in TF_CONFIG. Empty after printing a usage error.
std::string ListenAddress(const Flags& f, const ClusterConfig& config, int* rc) {
  std::string listen = f.Get("listen");
  if (!listen.empty()) return listen;
  auto port = f.GetInt("port", -1, 0, 65535);
  if (!port.ok()) {
    *rc = Usage("master", port.status().message());
    return "";
  }
  if (*port >= 0) return absl::StrCat("0.0.0.0:", *port);
  if (!config.task.job.empty()) {  // TF_CONFIG names the master's own task
    auto own = TaskAddress(config.cluster, config.task);
    if (!own.ok()) {
      *rc = Usage("master", own.status().message());
      return "";
    }
    return absl::StrCat("0.0.0.0:", own->substr(own->rfind(':') + 1));
  }
  *rc = Usage("master", "pass --port=P or --listen=HOST:PORT");
  return "";
}

// Reads the flags that need no logger into `opts`; returns 0, or the exit
// code after printing why.
int ParseMasterFlags(const Flags& f, master::MasterServerOptions* opts, std::string* port_file) {
  if (f.Has("state_dir") && f.Get("state_dir").empty()) return Usage("master", "--state_dir needs a directory");
  if (f.Has("log_level") && !SetLogLevel(f.Get("log_level"))) return Usage("master", "unknown --log_level");
  auto config = daemon::ClusterFrom(f, /*needs_task=*/false);
  if (!config.ok()) return Usage("master", config.status().message());
  auto port_flag = daemon::PortFileFlag(f);
  if (!port_flag.ok()) return Usage("master", port_flag.status().message());
  *port_file = *port_flag;
  int rc = 0;
  opts->address = ListenAddress(f, *config, &rc);
  if (rc != 0) return rc;
  // Jobs run on a fixed number of threads; past the queue, submits are
  // refused (RESOURCE_EXHAUSTED) rather than piling up. A thread each:
  // bounded well below what a machine can start.
  auto running = f.GetInt("max_running_jobs", opts->max_running_jobs, 1, 1024);
  if (!running.ok()) return Usage("master", running.status().message());
  opts->max_running_jobs = *running;
  auto queued = f.GetInt("max_queued_jobs", opts->max_queued_jobs, 0, 1 << 20);
  if (!queued.ok()) return Usage("master", queued.status().message());
  opts->max_queued_jobs = *queued;
  // A step is stalled after max(factor x the recent median, seconds).
  master::StepWatchOptions& watch = opts->step_watch;
  auto stall_after = f.GetInt("stall_after_seconds", absl::ToInt64Seconds(watch.floor), 1, 86400);
  auto stall_factor = f.GetInt("stall_factor", static_cast<int>(watch.factor), 2, 10000);
  if (!stall_after.ok() || !stall_factor.ok()) {
    return Usage("master", (stall_after.ok() ? stall_factor : stall_after).status().message());
  }
  watch.floor = absl::Seconds(*stall_after);
  watch.factor = *stall_factor;
  opts->cluster = daemon::WithoutJob(config->cluster, config->task.job.empty() ? "master" : config->task.job);
  // Without it, jobs are kept in memory and forgotten on restart.
  opts->state_dir = f.Get("state_dir");
  if (absl::Status s = daemon::UploadFlags(f, &opts->uploads); !s.ok()) return Usage("master", s.message());
  return 0;
}

// --auth_tokens_file: bearer tokens, only over TLS.
absl::Status LoadTokens(const Flags& f, master::MasterServerOptions* opts) {
  if (!f.Has("auth_tokens_file")) return absl::OkStatus();
  auto tokens = TokenTable::Load(f.Get("auth_tokens_file"));
  if (!tokens.ok()) return tokens.status();
  Logger("master")->info("{} bearer token(s) from {}", (*tokens)->size(), f.Get("auth_tokens_file"));
  opts->tokens = std::shared_ptr<TokenTable>(std::move(*tokens));
  return absl::OkStatus();
}

}  // namespace

int RunMasterCommand(int argc, char** argv) {
  auto f = Flags::Parse(argc, argv, 2,
                        {"cluster", "task", "listen", "port", "port_file", "log_level", "state_dir", "ca", "cert",
                         "key", "health_port", "auth_tokens_file", "checkpoint_root", "data_root", "memory_limit",
                         "max_message_bytes", "max_running_jobs", "max_queued_jobs", "metrics_port", "metrics_host",
                         "metrics_port_file", "stall_after_seconds", "stall_factor", "upload_root",
                         "max_upload_bytes", "upload_quota_bytes"},
                        {"insecure", "metrics_plaintext"});
  if (!f.ok()) return Usage("master", f.status().message());
  master::MasterServerOptions opts;
  std::string port_file;
  if (int rc = ParseMasterFlags(*f, &opts, &port_file); rc != 0) return rc;
  SetTaskId("0");
  auto log = Logger("master");
  if (absl::Status s = daemon::ApplyMemoryFlags(*f, "master"); !s.ok()) return Usage("master", s.message());
  auto security = daemon::DaemonSecurity(*f, "master", "master");
  if (!security.ok()) {
    log->error("cannot start: {}", std::string(security.status().message()));
    return 1;
  }
  opts.security = *security;
  if (f->Has("auth_tokens_file") && (*security)->insecure()) {
    return Usage("master", "--auth_tokens_file needs TLS (tokens are never sent in plaintext)");
  }
  absl::Status s = LoadTokens(*f, &opts);
  BlockTerminationSignals();
  absl::StatusOr<std::string> checkpoint_root = s.ok() ? daemon::ConfineFiles(*f) : s;
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
  auto health = daemon::HealthServer::Start(*f);
  absl::Status started = health.status();
  absl::StatusOr<std::unique_ptr<MonitoringServer>> monitoring = std::unique_ptr<MonitoringServer>();
  master::MonitoringPages pages((*server)->master(), (*server)->address());
  if (started.ok()) monitoring = daemon::StartMonitoring(*f, "master", pages.Pages());
  if (started.ok()) started = monitoring.status();
  if (started.ok() && !port_file.empty()) started = WritePortFile(port_file, (*server)->port());
  if (!started.ok()) {
    log->error("cannot start: {}", std::string(started.message()));
    if (health.ok() && *health != nullptr) (*health)->Stop();
    (*server)->Shutdown();
    return 1;
  }
  const int sig = WaitForTerminationSignal();
  if (*health != nullptr) (*health)->Stop();
  log->info("signal {}: stopping", sig);
  (*server)->Shutdown();
  log->info("stopped");
  return 0;
}

}  // namespace weft
