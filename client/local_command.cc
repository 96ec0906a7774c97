#include "client/local_command.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/grpc_client_auth.h"
#include "client/daemon_commands.h"
#include "client/flags.h"
#include "client/job_commands.h"
#include "job/job_spec.h"
#include "client/local_cluster.h"
#include "client/port_file.h"
#include "client/grpc_master_client.h"
#include "client/subprocess.h"
#include "common/certs.h"
#include "common/env.h"
#include "graph/device_name.h"
#include "ps/ps_handler.h"

namespace weft {
namespace {

// What `weft local` was asked to do, from its flags and job file.
struct LocalRun {
  LocalClusterOptions cluster;
  int max_restarts = 10;
  absl::Duration master_wait;
  bool json = false;
  bool insecure = false;
  bool has_job = false;
  JobSpec job;
};

// Prints "weft local: <message>" and returns 2 (a usage error).
int Usage(absl::string_view message) {
  std::fprintf(stderr, "weft local: %s\n", std::string(message).c_str());
  return 2;
}

// Parses the flags into `run`; returns 0, or the exit code after printing why.
int ParseLocalFlags(int argc, char** argv, LocalRun* run) {
  auto f = Flags::Parse(argc, argv, 2,
                        {"workers", "ps", "cpu_devices", "gpus", "output", "log_dir", "log_level", "max_restarts",
                         "resume_from", "master_wait_seconds", "checkpoint_root", "data_root", "metrics_port",
                         "shared_memory"},
                        {"insecure", "metrics_plaintext"});
  if (!f.ok()) return Usage(f.status().message());
  auto workers = f->GetInt("workers", 1, 1, 64);
  auto ps = f->GetInt("ps", 0, 0, 64);
  auto cpus = f->GetInt("cpu_devices", 1, 1, 64);
  auto gpus = f->GetInt("gpus", -1, -1, 64);
  const std::string output = f->Get("output", "text");
  for (const absl::Status& s : {workers.status(), ps.status(), cpus.status(), gpus.status()}) {
    if (!s.ok()) return Usage(s.message());
  }
  if (f->args().size() > 1) return Usage("expected at most one job file");
  if (output != "text" && output != "json") return Usage("--output must be text or json");
  auto max_restarts = f->GetInt("max_restarts", 10, 0, 1000000);
  auto master_wait = f->GetInt("master_wait_seconds", 120, 0, 86400);
  if (!max_restarts.ok()) return Usage(max_restarts.status().message());
  if (!master_wait.ok()) return Usage(master_wait.status().message());
  if (f->Has("checkpoint_root") && f->Get("checkpoint_root").empty()) {
    return Usage("--checkpoint_root needs a directory");
  }
  if (f->Has("resume_from") && f->args().empty()) return Usage("--resume_from needs a job file");
  LocalClusterOptions& c = run->cluster;
  c.workers = *workers;
  c.ps = *ps;
  c.cpu_devices = *cpus;
  c.gpus = *gpus;
  // Every daemon gets the same one: the job's checkpoint.dir and
  // --resume_from must lie inside it.
  c.checkpoint_root = f->Get("checkpoint_root", ps::kDefaultCheckpointRoot);
  c.data_root = f->Get("data_root", kDefaultDataRoot);
  c.log_level = f->Get("log_level");
  c.log_dir = f->Get("log_dir");
  if (f->Has("metrics_port")) {
    auto metrics_port = f->GetInt("metrics_port", 0, 0, 65535);
    if (!metrics_port.ok()) return Usage(metrics_port.status().message());
    c.metrics_port = *metrics_port;
  } else if (f->GetBool("metrics_plaintext")) {
    return Usage("--metrics_plaintext needs --metrics_port");
  }
  c.metrics_plaintext = f->GetBool("metrics_plaintext");
  c.shared_memory = f->Get("shared_memory", "true");
  if (c.shared_memory != "true" && c.shared_memory != "false") {
    return Usage("--shared_memory must be true or false");
  }
  run->max_restarts = *max_restarts;
  run->master_wait = absl::Seconds(*master_wait);
  run->json = output == "json";
  run->insecure = f->GetBool("insecure");
  if (f->args().empty()) return 0;
  run->has_job = true;
  const std::string& path = f->args()[0];
  auto loaded = LoadJobFile(path);
  if (!loaded.ok()) {
    std::fprintf(stderr, "weft: %s\n", std::string(loaded.status().message()).c_str());
    return 1;
  }
  run->job = *std::move(loaded);
  if (absl::Status s = ValidateJob(run->job); !s.ok()) {
    std::fprintf(stderr, "weft: %s: %s\n", path.c_str(), std::string(s.message()).c_str());
    return 1;
  }
  if (run->job.name().empty()) {
    std::string base = path.substr(path.rfind('/') + 1);
    run->job.set_name(base.substr(0, base.find('.')));
  }
  if (f->Has("resume_from")) {
    if (absl::Status s = SetResumeFrom(f->Get("resume_from"), &run->job); !s.ok()) {
      std::fprintf(stderr, "weft: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  // A job that asks for the CPU keeps its workers off the GPUs.
  if (run->job.device() == JobSpec::CPU) c.gpus = 0;
  return 0;
}

// Creates the log directory (a new temporary one unless --log_dir) and an
// empty master state directory in it: a restarted master finds its
// unfinished jobs there and resumes them, but a new `weft local` is a new
// cluster, so jobs of an earlier run in the same --log_dir are not resumed.
absl::Status PrepareDirectories(LocalClusterOptions* c) {
  if (c->log_dir.empty()) {
    char tmpl[] = "/tmp/weft-local-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      return absl::ErrnoToStatus(errno, "mkdtemp");
    }
    c->log_dir = tmpl;
  }
  c->state_dir = c->log_dir + "/master-state";
  if (Env::Default()->FileExists(c->state_dir)) {
    if (absl::Status s = DeleteRecursively(Env::Default(), c->state_dir); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("clearing '", c->state_dir, "': ", s.message()));
    }
  }
  if (::mkdir(c->state_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create '", c->state_dir, "'"));
  }
  return absl::OkStatus();
}

// mTLS with a throwaway CA under the log directory: every daemon's flags in
// `c->tls_flags`, this command's admin credentials in `client`.
absl::Status SetUpTls(LocalClusterOptions* c, MasterClientOptions* client) {
  std::vector<std::string> names = {"master"};
  for (int i = 0; i < c->workers; ++i) names.push_back(TaskName("worker", i));
  for (int i = 0; i < c->ps; ++i) names.push_back(TaskName("ps", i));
  auto creds = MakeLocalCredentials(c->log_dir + "/tls", names);
  if (!creds.ok()) {
    return absl::Status(creds.status().code(),
                        absl::StrCat("creating the cluster's certificates: ", creds.status().message()));
  }
  for (const auto& [name, files] : creds->daemon) {
    c->tls_flags[name] = {"--ca=" + creds->ca, "--cert=" + files.first, "--key=" + files.second};
  }
  ClientCredentialFiles files;
  files.ca = creds->ca;
  files.cert = creds->user_cert;
  files.key = creds->user_key;
  auto channel_creds = ClientChannelCredentials(files);
  if (!channel_creds.ok()) return channel_creds.status();
  client->credentials = *channel_creds;
  return absl::OkStatus();
}

// Submits the job (if any) and follows it; a termination signal cancels it.
// Without a job, serves until the signal. Returns the exit code.
int SubmitAndFollow(const LocalRun& run, MasterClient* client) {
  // A signal cancels the job (if any) and ends the wait below.
  std::atomic<bool> stopping{false};
  std::atomic<bool> finished{false};  // set before waking the signal thread ourselves
  std::string job_id;
  absl::Mutex job_mu;
  std::thread signals([&] {
    WaitForTerminationSignal();
    if (finished) return;
    stopping = true;
    std::string id;
    {
      absl::MutexLock lock(&job_mu);
      id = job_id;
    }
    if (!id.empty()) {
      std::fprintf(stderr, "\nweft local: stopping: cancelling job %s\n", id.c_str());
      client->CancelJob(id).IgnoreError();
    }
  });
  if (!run.has_job) {
    std::fprintf(stderr, "weft local: serving; Ctrl-C stops every task\n");
    signals.join();
    return 0;
  }
  int rc = 0;
  auto id = client->SubmitJob(run.job);
  if (!id.ok()) {
    std::fprintf(stderr, "weft: %s\n", std::string(id.status().message()).c_str());
    rc = 1;
  } else {
    {
      absl::MutexLock lock(&job_mu);
      job_id = *id;
    }
    std::fprintf(stderr, "submitted job %s\n", id->c_str());
    rc = FollowJob(client, *id, run.json, run.master_wait);
  }
  // Wake the signal thread if no signal came, so it can be joined.
  finished = true;
  if (!stopping) ::kill(::getpid(), SIGTERM);
  signals.join();
  return rc;
}

void ReportUncleanExits(const std::vector<Task>& tasks) {
  for (const Task& t : tasks) {
    const int st = t.process->exit_status();
    if (!t.given_up && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {  // a given-up task was reported then
      std::fprintf(stderr, "weft local: task %s did not stop cleanly (%s); see %s\n", t.name.c_str(),
                   DescribeExitStatus(st).c_str(), t.log.c_str());
    }
  }
}

}  // namespace

int RunLocalCommand(int argc, char** argv) {
  LocalRun run;
  if (int rc = ParseLocalFlags(argc, argv, &run); rc != 0) return rc;
  LocalClusterOptions& c = run.cluster;
  if (absl::Status s = PrepareDirectories(&c); !s.ok()) {
    std::fprintf(stderr, "weft local: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  c.self = SelfPath();
  BlockTerminationSignals();  // SubmitAndFollow's signal thread takes them
  MasterClientOptions client_options;
  if (run.insecure) {
    std::fprintf(stderr, "weft local: --insecure: the cluster runs without TLS or authentication\n");
  } else if (absl::Status s = SetUpTls(&c, &client_options); !s.ok()) {
    std::fprintf(stderr, "weft local: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::vector<Task> tasks;
  std::string cluster;
  absl::Status s = StartLocalTasks(c, &tasks, &cluster);
  std::unique_ptr<MasterClient> client;
  if (s.ok()) {
    client = MasterClient::Create(tasks.back().address, client_options);
    s = WaitUntilReady(client.get(), &tasks, c.workers + c.ps, absl::Seconds(60));
  }
  if (!s.ok()) {
    std::fprintf(stderr, "weft local: %s\n", std::string(s.message()).c_str());
    StopAll(&tasks);
    return 1;
  }
  std::fprintf(stderr, "weft local: master %s, cluster %s, logs in %s\n", tasks.back().address.c_str(),
               cluster.c_str(), c.log_dir.c_str());
  if (!c.tls_flags.empty()) {
    std::fprintf(stderr, "weft local: mTLS; as its admin: WEFT_CA=%s/tls/ca.crt WEFT_CERT=%s/tls/local.crt "
                 "WEFT_KEY=%s/tls/local.key\n", c.log_dir.c_str(), c.log_dir.c_str(), c.log_dir.c_str());
  }
  if (c.metrics_port >= 0) {
    auto port = ReadPortFile(c.log_dir + "/master-0.metrics_port");
    if (port.ok()) {
      std::fprintf(stderr, "weft local: dashboard and metrics at %s://127.0.0.1:%d/ (each task's /metrics: "
                   "%s/*.metrics_port)\n", c.metrics_plaintext || run.insecure ? "http" : "https", *port,
                   c.log_dir.c_str());
    }
  }
  Supervisor supervisor(&tasks, run.max_restarts, c.log_dir + "/tasks.txt");
  supervisor.Start();
  const int rc = SubmitAndFollow(run, client.get());
  supervisor.Stop();
  ReportUncleanExits(tasks);
  return rc;
}

}  // namespace weft
