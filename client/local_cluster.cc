#include "client/local_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/port_file.h"
#include "common/certs.h"
#include "common/env.h"
#include "common/status_macros.h"
#include "graph/device_name.h"

namespace weft {
namespace {

// A child's exit is noticed within this; waitpid has no timeout, and a
// thread per child would be more code than the delay costs.
constexpr absl::Duration kCheckInterval = absl::Milliseconds(100);
// A task that exits sooner than this after its start waits this long
// before the next one, so a crash loop does not spend every restart in a
// second.
constexpr absl::Duration kQuickExit = absl::Seconds(10);
constexpr absl::Duration kCrashLoopDelay = absl::Seconds(1);

std::string Tail(const std::string& path, int lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  const size_t from = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
  return absl::StrJoin(all.begin() + from, all.end(), "\n");
}

// Starts task `name` ("worker:0") with `argv` and the flags every task gets.
absl::Status StartTask(const LocalClusterOptions& o, const std::string& name, std::vector<std::string> argv,
                       std::vector<Task>* tasks) {
  const std::string job_name = name.substr(0, name.find(':'));
  const std::string index = name.substr(name.find(':') + 1);
  const std::string identity = job_name == "master" ? "master" : TaskName(job_name, std::stoi(index));
  auto tls = o.tls_flags.find(identity);
  if (tls == o.tls_flags.end()) {
    argv.push_back("--insecure");
  } else {
    argv.insert(argv.end(), tls->second.begin(), tls->second.end());
  }
  Task t;
  t.name = name;
  t.log = absl::StrCat(o.log_dir, "/", job_name, "-", index, ".log");
  t.port_file = absl::StrCat(o.log_dir, "/", job_name, "-", index, ".port");
  std::remove(t.port_file.c_str());  // one left by an earlier run in this --log_dir
  t.process = std::make_unique<Subprocess>();
  argv.push_back("--listen=127.0.0.1:0");
  argv.push_back("--port_file=" + t.port_file);
  if (!o.log_level.empty()) argv.push_back("--log_level=" + o.log_level);
  if (job_name != "master") argv.push_back("--shared_memory=" + o.shared_memory);
  argv.push_back("--checkpoint_root=" + o.checkpoint_root);
  argv.push_back("--data_root=" + o.data_root);
  // Uploaded datasets stay with the run: the master's store and each
  // task's copies under the log directory.
  if (job_name == "master") {
    argv.push_back(absl::StrCat("--upload_root=", o.log_dir, "/uploads"));
  } else {
    argv.push_back(absl::StrCat("--dataset_cache=", o.log_dir, "/datasets-", job_name, "-", index));
  }
  if (o.metrics_port >= 0) {
    const std::string port_file = absl::StrCat(o.log_dir, "/", job_name, "-", index, ".metrics_port");
    std::remove(port_file.c_str());
    argv.push_back(absl::StrCat("--metrics_port=", job_name == "master" ? o.metrics_port : 0));
    argv.push_back("--metrics_host=127.0.0.1");
    argv.push_back("--metrics_port_file=" + port_file);
    if (o.metrics_plaintext) argv.push_back("--metrics_plaintext");
  }
  t.argv = argv;
  RETURN_IF_ERROR(t.process->Start(argv, t.log));
  t.started = absl::Now();
  tasks->push_back(std::move(t));
  return absl::OkStatus();
}

// Waits for a started task's port; from then on it restarts on that port.
absl::Status AwaitPort(Task* t, absl::Time deadline) {
  absl::StatusOr<int> port = WaitForPortFile(t->process.get(), t->port_file, deadline);
  if (!port.ok()) {
    return absl::UnavailableError(absl::StrCat("task ", t->name, " did not start: ", port.status().message(),
                                               "; the end of its log (", t->log, "):\n", Tail(t->log, 15)));
  }
  t->address = absl::StrCat("127.0.0.1:", *port);
  for (std::string& arg : t->argv) {
    if (arg == "--listen=127.0.0.1:0") arg = "--listen=" + t->address;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status StartLocalTasks(const LocalClusterOptions& o, std::vector<Task>* tasks, std::string* cluster) {
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (int i = 0; i < o.ps; ++i) {
    RETURN_IF_ERROR(StartTask(o, absl::StrCat("ps:", i), {o.self, "ps", absl::StrCat("--task=ps:", i)}, tasks));
  }
  for (int i = 0; i < o.workers; ++i) {
    RETURN_IF_ERROR(StartTask(o, absl::StrCat("worker:", i),
                              {o.self, "worker", absl::StrCat("--task=worker:", i),
                               absl::StrCat("--cpu_devices=", o.cpu_devices), absl::StrCat("--gpus=", o.gpus)},
                              tasks));
  }
  // The tasks start side by side; then their addresses make the cluster.
  for (Task& t : *tasks) RETURN_IF_ERROR(AwaitPort(&t, deadline));
  std::vector<std::string> worker_addrs, ps_addrs;
  for (const Task& t : *tasks) (absl::StartsWith(t.name, "ps:") ? ps_addrs : worker_addrs).push_back(t.address);
  *cluster = absl::StrCat("worker=", absl::StrJoin(worker_addrs, ","));
  if (!ps_addrs.empty()) absl::StrAppend(cluster, ";ps=", absl::StrJoin(ps_addrs, ","));
  RETURN_IF_ERROR(
      StartTask(o, "master:0", {o.self, "master", "--cluster=" + *cluster, "--state_dir=" + o.state_dir}, tasks));
  RETURN_IF_ERROR(AwaitPort(&tasks->back(), deadline));
  return WriteTasksFile(o.log_dir + "/tasks.txt", *tasks);
}

std::string SelfPath() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

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

absl::Status WriteTasksFile(const std::string& path, const std::vector<Task>& tasks) {
  std::string text;
  for (const Task& t : tasks) absl::StrAppend(&text, t.name, " ", t.process->pid(), " ", t.address, "\n");
  const absl::string_view pieces[] = {text};
  return WriteFileAtomically(Env::Default(), path, pieces);
}

void Supervisor::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Supervisor::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (thread_.joinable()) {
    thread_.join();
  } else {
    StopAll(tasks_);
  }
}

void Supervisor::Run() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), kCheckInterval);
      if (stopping_) break;
    }
    CheckTasks();
  }
  StopAll(tasks_);
}

void Supervisor::CheckTasks() {
  const absl::Time now = absl::Now();
  bool restarted = false;
  for (Task& t : *tasks_) {
    if (t.given_up) continue;
    if (!t.restart_pending) {
      if (t.process->Running()) continue;
      const std::string how = DescribeExitStatus(t.process->exit_status());
      if (t.restarts >= max_restarts_) {
        t.given_up = true;
        std::fprintf(stderr,
                     "weft local: task %s exited (%s); not restarting it (--max_restarts=%d reached); see %s\n",
                     t.name.c_str(), how.c_str(), max_restarts_, t.log.c_str());
        continue;
      }
      ++t.restarts;
      std::fprintf(stderr, "weft local: task %s exited (%s); restarting it (restart %d of at most %d)\n",
                   t.name.c_str(), how.c_str(), t.restarts, max_restarts_);
      t.restart_pending = true;
      t.restart_at = now - t.started < kQuickExit ? now + kCrashLoopDelay : now;
    }
    if (now < t.restart_at) continue;
    t.restart_pending = false;
    if (absl::Status s = t.process->Start(t.argv, t.log); !s.ok()) {
      t.given_up = true;
      std::fprintf(stderr, "weft local: cannot restart task %s: %s\n", t.name.c_str(),
                   std::string(s.message()).c_str());
      continue;
    }
    t.started = now;
    restarted = true;
  }
  if (restarted) {
    if (absl::Status s = WriteTasksFile(tasks_file_, *tasks_); !s.ok()) {
      std::fprintf(stderr, "weft local: %s\n", std::string(s.message()).c_str());
    }
  }
}

absl::StatusOr<LocalCredentials> MakeLocalCredentials(const std::string& dir, const std::vector<std::string>& names) {
  LocalCredentials c;
  RETURN_IF_ERROR(CreateCa(dir, /*days=*/30, /*overwrite=*/true, "weft local CA"));
  c.ca = dir + "/ca.crt";
  auto issue = [&](const std::string& name, Role role) -> absl::StatusOr<std::pair<std::string, std::string>> {
    IssueOptions o;
    o.name = name;
    o.role = role;
    o.days = 30;
    o.overwrite = true;
    if (role == Role::kCluster) o.hosts = {"127.0.0.1", "localhost"};
    ASSIGN_OR_RETURN(std::string cert, IssueCertificate(dir, o));
    ASSIGN_OR_RETURN(std::string base, CertFileBase(name));
    return std::make_pair(cert, absl::StrCat(dir, "/", base, ".key"));
  };
  for (const std::string& name : names) {
    ASSIGN_OR_RETURN(c.daemon[name], issue(name, Role::kCluster));
  }
  ASSIGN_OR_RETURN(auto user, issue("local", Role::kAdmin));
  c.user_cert = user.first;
  c.user_key = user.second;
  return c;
}

}  // namespace weft
