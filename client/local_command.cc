#include "client/local_command.h"

#include <signal.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/daemon_commands.h"
#include "client/flags.h"
#include "client/job_commands.h"
#include "client/job_file.h"
#include "client/master_client.h"
#include "client/subprocess.h"
#include "common/status_macros.h"

namespace weft {
namespace {

struct Task {
  std::string name;  // "worker:0"
  std::string log;
  std::unique_ptr<Subprocess> process;
};

std::string SelfPath() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

std::string Tail(const std::string& path, int lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  const size_t from = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
  return absl::StrJoin(all.begin() + from, all.end(), "\n");
}

// Waits until the master lists a device of every task, or a task exits, or
// the deadline passes.
absl::Status WaitUntilReady(MasterClient* client, std::vector<Task>* tasks, int expected_tasks, absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  absl::Status last = absl::UnavailableError("no answer yet");
  while (absl::Now() < deadline) {
    for (Task& t : *tasks) {
      if (!t.process->Running()) {
        return absl::UnavailableError(absl::StrCat("task ", t.name, " exited during start-up; the end of its log (",
                                                   t.log, "):\n", Tail(t.log, 15)));
      }
    }
    auto devices = client->ListDevices();
    if (devices.ok()) {
      std::set<std::string> seen;
      for (const auto& d : *devices) seen.insert(d.name().substr(0, d.name().find("/device:")));
      if (static_cast<int>(seen.size()) >= expected_tasks) return absl::OkStatus();
      last = absl::UnavailableError(absl::StrCat("the master sees ", seen.size(), " of ", expected_tasks, " tasks"));
    } else {
      last = devices.status();
    }
    // A start-up probe, bounded by the deadline; not on any step's path.
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat("the local cluster did not come up within ",
                                                  absl::FormatDuration(limit), ": ", last.message()));
}

void StopAll(std::vector<Task>* tasks) {
  // Master first (it is the last task in the list), so no step starts while
  // workers go away; then everything else in parallel.
  for (auto it = tasks->rbegin(); it != tasks->rend(); ++it) it->process->Signal(SIGTERM);
  for (auto it = tasks->rbegin(); it != tasks->rend(); ++it) it->process->Terminate(absl::Seconds(10));
}

}  // namespace

int RunLocalCommand(int argc, char** argv) {
  auto f = Flags::Parse(argc, argv, 2, {"workers", "ps", "cpu_devices", "gpus", "output", "log_dir", "log_level"}, {});
  if (!f.ok()) {
    std::fprintf(stderr, "weft local: %s\n", std::string(f.status().message()).c_str());
    return 2;
  }
  auto workers = f->GetInt("workers", 1, 1, 64);
  auto ps = f->GetInt("ps", 0, 0, 64);
  auto cpus = f->GetInt("cpu_devices", 1, 1, 64);
  auto gpus = f->GetInt("gpus", -1, -1, 64);
  const std::string output = f->Get("output", "text");
  if (!workers.ok() || !ps.ok() || !cpus.ok() || !gpus.ok() || (output != "text" && output != "json") || f->args().size() > 1) {
    std::fprintf(stderr, "weft local: %s\n",
                 !workers.ok() ? std::string(workers.status().message()).c_str()
                 : !ps.ok()    ? std::string(ps.status().message()).c_str()
                 : !cpus.ok()  ? std::string(cpus.status().message()).c_str()
                 : !gpus.ok()  ? std::string(gpus.status().message()).c_str()
                 : f->args().size() > 1 ? "expected at most one job file"
                                        : "--output must be text or json");
    return 2;
  }
  const bool json = output == "json";
  JobSpec job;
  if (f->args().size() == 1) {
    auto loaded = LoadJobFile(f->args()[0]);
    if (!loaded.ok()) {
      std::fprintf(stderr, "weft: %s\n", std::string(loaded.status().message()).c_str());
      return 1;
    }
    job = *std::move(loaded);
    if (absl::Status s = ValidateJob(job); !s.ok()) {
      std::fprintf(stderr, "weft: %s: %s\n", f->args()[0].c_str(), std::string(s.message()).c_str());
      return 1;
    }
    if (job.name().empty()) {
      std::string base = f->args()[0].substr(f->args()[0].rfind('/') + 1);
      job.set_name(base.substr(0, base.find('.')));
    }
  }

  std::string log_dir = f->Get("log_dir");
  if (log_dir.empty()) {
    char tmpl[] = "/tmp/weft-local-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      std::perror("weft local: mkdtemp");
      return 1;
    }
    log_dir = tmpl;
  }
  const std::string self = SelfPath();

  // Ports: every task's address is in the cluster flag, so pick them first.
  std::vector<std::string> worker_addrs, ps_addrs;
  std::string master_addr;
  auto pick = [](std::string* out) -> bool {
    auto port = PickFreeLoopbackPort();
    if (!port.ok()) return false;
    *out = absl::StrCat("127.0.0.1:", *port);
    return true;
  };
  bool ok = pick(&master_addr);
  worker_addrs.resize(*workers);
  ps_addrs.resize(*ps);
  for (auto& a : worker_addrs) ok = ok && pick(&a);
  for (auto& a : ps_addrs) ok = ok && pick(&a);
  if (!ok) {
    std::fprintf(stderr, "weft local: cannot pick loopback ports\n");
    return 1;
  }
  std::string cluster = absl::StrCat("worker=", absl::StrJoin(worker_addrs, ","));
  if (!ps_addrs.empty()) absl::StrAppend(&cluster, ";ps=", absl::StrJoin(ps_addrs, ","));

  BlockTerminationSignals();  // the signal thread below takes them
  std::vector<Task> tasks;
  auto start = [&](const std::string& name, std::vector<std::string> argv) -> absl::Status {
    Task t;
    t.name = name;
    t.log = absl::StrCat(log_dir, "/", name.substr(0, name.find(':')), "-", name.substr(name.find(':') + 1), ".log");
    t.process = std::make_unique<Subprocess>();
    if (f->Has("log_level")) argv.push_back("--log_level=" + f->Get("log_level"));
    RETURN_IF_ERROR(t.process->Start(argv, t.log));
    tasks.push_back(std::move(t));
    return absl::OkStatus();
  };
  absl::Status s;
  for (int i = 0; i < *ps && s.ok(); ++i) {
    s = start(absl::StrCat("ps:", i), {self, "ps", absl::StrCat("--task=ps:", i), "--cluster=" + cluster,
                                       "--listen=" + ps_addrs[i]});
  }
  for (int i = 0; i < *workers && s.ok(); ++i) {
    s = start(absl::StrCat("worker:", i), {self, "worker", absl::StrCat("--task=worker:", i),
                                           "--cluster=" + cluster, "--listen=" + worker_addrs[i],
                                           absl::StrCat("--cpu_devices=", *cpus),
                                           // A job that asks for the CPU keeps its workers off the GPUs.
                                           absl::StrCat("--gpus=", job.device() == JobSpec::CPU ? 0 : *gpus)});
  }
  if (s.ok()) s = start("master:0", {self, "master", "--cluster=" + cluster, "--listen=" + master_addr});
  auto client = MasterClient::Create(master_addr);
  if (s.ok()) s = WaitUntilReady(client.get(), &tasks, *workers + *ps, absl::Seconds(60));
  if (!s.ok()) {
    std::fprintf(stderr, "weft local: %s\n", std::string(s.message()).c_str());
    StopAll(&tasks);
    return 1;
  }
  std::fprintf(stderr, "weft local: master %s, cluster %s, logs in %s\n", master_addr.c_str(), cluster.c_str(),
               log_dir.c_str());

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

  int rc = 0;
  if (f->args().empty()) {
    std::fprintf(stderr, "weft local: serving; Ctrl-C stops every task\n");
    signals.join();
  } else {
    auto id = client->SubmitJob(job);
    if (!id.ok()) {
      std::fprintf(stderr, "weft: %s\n", std::string(id.status().message()).c_str());
      rc = 1;
    } else {
      {
        absl::MutexLock lock(&job_mu);
        job_id = *id;
      }
      std::fprintf(stderr, "submitted job %s\n", id->c_str());
      rc = FollowJob(client.get(), *id, json);
    }
    // Wake the signal thread if no signal came, so it can be joined.
    finished = true;
    if (!stopping) ::kill(::getpid(), SIGTERM);
    signals.join();
  }
  StopAll(&tasks);
  for (const Task& t : tasks) {
    const int st = t.process->exit_status();
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      std::fprintf(stderr, "weft local: task %s did not stop cleanly (status %d); see %s\n", t.name.c_str(), st,
                   t.log.c_str());
    }
  }
  return rc;
}

}  // namespace weft
