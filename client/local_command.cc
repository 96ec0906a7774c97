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
#include <fstream>
#include <memory>
#include <set>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/daemon_commands.h"
#include "client/flags.h"
#include "client/job_commands.h"
#include "client/job_file.h"
#include "client/client_auth.h"
#include "client/master_client.h"
#include "client/port_file.h"
#include "common/certs.h"
#include "graph/device_name.h"
#include "client/subprocess.h"
#include "common/env.h"
#include "common/status_macros.h"
#include "ps/ps_handler.h"

namespace weft {
namespace {

struct Task {
  std::string name;     // "worker:0"
  std::string address;  // "127.0.0.1:40123", once the task reported its port
  std::string log;
  std::string port_file;
  // Its command line: --listen=127.0.0.1:0 at first, then the port it bound,
  // so that a restart comes back at the same address.
  std::vector<std::string> argv;
  std::unique_ptr<Subprocess> process;
  absl::Time started;  // of the current process
  int restarts = 0;
  bool restart_pending = false;  // exited; starts again at `restart_at`
  absl::Time restart_at;
  bool given_up = false;  // exited with no restarts left
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

// `name pid address` per task, replaced in one rename so that a reader never
// sees half a file.
absl::Status WriteTasksFile(const std::string& path, const std::vector<Task>& tasks) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const Task& t : tasks) out << t.name << " " << t.process->pid() << " " << t.address << "\n";
    out.flush();
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write '", tmp, "'"));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot rename '", tmp, "' to '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Keeps a running local cluster's tasks up: a task that exits unasked (a
// crash, kill -9, the OOM killer) starts again with Task::argv, on the port
// it bound first, appending to the same log, at most `max_restarts`
// times. Its thread also stops the tasks at the end: PR_SET_PDEATHSIG ties a
// child to the thread that forked it, so the thread that restarts children
// must outlive them.
//
// Thread-safety: Start and Stop are called from one thread. Between them the
// tasks belong to the supervisor's thread.
class Supervisor {
 public:
  // `tasks` must outlive this; `tasks_file` is rewritten on each restart.
  Supervisor(std::vector<Task>* tasks, int max_restarts, std::string tasks_file)
      : tasks_(tasks), max_restarts_(max_restarts), tasks_file_(std::move(tasks_file)) {}
  ~Supervisor() { Stop(); }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }

  // Stops every task, master first, with no restarts from the moment it is
  // called; returns once all have exited.
  void Stop() {
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

 private:
  // A child's exit is noticed within this; waitpid has no timeout, and a
  // thread per child would be more code than the delay costs.
  static constexpr absl::Duration kCheckInterval = absl::Milliseconds(100);
  // A task that exits sooner than this after its start waits this long
  // before the next one, so a crash loop does not spend every restart in a
  // second.
  static constexpr absl::Duration kQuickExit = absl::Seconds(10);
  static constexpr absl::Duration kCrashLoopDelay = absl::Seconds(1);

  void Run() {
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

  void CheckTasks() {
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

  std::vector<Task>* const tasks_;
  const int max_restarts_;
  const std::string tasks_file_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The throwaway credentials of a local cluster: a CA, a certificate per
// daemon (for 127.0.0.1 and localhost) and an admin user for this command.
struct LocalCredentials {
  std::string ca;
  std::map<std::string, std::pair<std::string, std::string>> daemon;  // name -> cert, key
  std::string user_cert, user_key;
};

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

}  // namespace

int RunLocalCommand(int argc, char** argv) {
  auto f = Flags::Parse(argc, argv, 2,
                        {"workers", "ps", "cpu_devices", "gpus", "output", "log_dir", "log_level", "max_restarts",
                         "resume_from", "master_wait_seconds", "checkpoint_root", "data_root"},
                        {"insecure"});
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
  auto max_restarts = f->GetInt("max_restarts", 10, 0, 1000000);
  auto master_wait = f->GetInt("master_wait_seconds", 120, 0, 86400);
  if (!max_restarts.ok() || !master_wait.ok()) {
    std::fprintf(stderr, "weft local: %s\n",
                 std::string((!max_restarts.ok() ? max_restarts.status() : master_wait.status()).message()).c_str());
    return 2;
  }
  if (f->Has("checkpoint_root") && f->Get("checkpoint_root").empty()) {
    std::fprintf(stderr, "weft local: --checkpoint_root needs a directory\n");
    return 2;
  }
  // Every daemon gets the same one: the job's checkpoint.dir and
  // --resume_from must lie inside it.
  const std::string checkpoint_root = f->Get("checkpoint_root", ps::kDefaultCheckpointRoot);
  if (f->Has("resume_from") && f->args().empty()) {
    std::fprintf(stderr, "weft local: --resume_from needs a job file\n");
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
    if (f->Has("resume_from")) {
      if (absl::Status s = SetResumeFrom(f->Get("resume_from"), &job); !s.ok()) {
        std::fprintf(stderr, "weft: %s\n", std::string(s.message()).c_str());
        return 1;
      }
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

  BlockTerminationSignals();  // the signal thread below takes them
  std::vector<Task> tasks;
  // A restarted master finds its unfinished jobs here and resumes them. A
  // new `weft local` is a new cluster: jobs of an earlier run in the same
  // --log_dir are not resumed.
  const std::string state_dir = log_dir + "/master-state";
  if (Env::Default()->FileExists(state_dir)) {
    if (absl::Status s = DeleteRecursively(Env::Default(), state_dir); !s.ok()) {
      std::fprintf(stderr, "weft local: clearing '%s': %s\n", state_dir.c_str(), std::string(s.message()).c_str());
      return 1;
    }
  }
  if (::mkdir(state_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "weft local: cannot create '%s': %s\n", state_dir.c_str(), std::strerror(errno));
    return 1;
  }
  // mTLS with a throwaway CA under the log directory, unless --insecure.
  MasterClientOptions client_options;
  std::map<std::string, std::vector<std::string>> tls_flags;  // daemon identity -> its flags
  if (f->GetBool("insecure")) {
    std::fprintf(stderr, "weft local: --insecure: the cluster runs without TLS or authentication\n");
  } else {
    std::vector<std::string> names = {"master"};
    for (int i = 0; i < *workers; ++i) names.push_back(TaskName("worker", i));
    for (int i = 0; i < *ps; ++i) names.push_back(TaskName("ps", i));
    auto creds = MakeLocalCredentials(log_dir + "/tls", names);
    if (!creds.ok()) {
      std::fprintf(stderr, "weft local: creating the cluster's certificates: %s\n",
                   std::string(creds.status().message()).c_str());
      return 1;
    }
    for (const auto& [name, files] : creds->daemon) {
      tls_flags[name] = {"--ca=" + creds->ca, "--cert=" + files.first, "--key=" + files.second};
    }
    ClientCredentialFiles files;
    files.ca = creds->ca;
    files.cert = creds->user_cert;
    files.key = creds->user_key;
    auto channel_creds = ClientChannelCredentials(files);
    if (!channel_creds.ok()) {
      std::fprintf(stderr, "weft local: %s\n", std::string(channel_creds.status().message()).c_str());
      return 1;
    }
    client_options.credentials = *channel_creds;
  }
  auto security_flags = [&](const std::string& identity) {
    auto it = tls_flags.find(identity);
    return it == tls_flags.end() ? std::vector<std::string>{"--insecure"} : it->second;
  };
  // Every daemon binds port 0 and reports the port it got in DIR/<name>.port:
  // no port is picked and released first, for another process to take in
  // between. The tasks start knowing only themselves; the master, started
  // last with every task's address, sends them the cluster.
  auto start = [&](const std::string& name, std::vector<std::string> argv) -> absl::Status {
    const std::string job_name = name.substr(0, name.find(':'));
    const std::string index = name.substr(name.find(':') + 1);
    const std::string identity = job_name == "master" ? "master" : TaskName(job_name, std::stoi(index));
    for (const std::string& flag : security_flags(identity)) argv.push_back(flag);
    Task t;
    t.name = name;
    t.log = absl::StrCat(log_dir, "/", job_name, "-", index, ".log");
    t.port_file = absl::StrCat(log_dir, "/", job_name, "-", index, ".port");
    std::remove(t.port_file.c_str());  // one left by an earlier run in this --log_dir
    t.process = std::make_unique<Subprocess>();
    argv.push_back("--listen=127.0.0.1:0");
    argv.push_back("--port_file=" + t.port_file);
    if (f->Has("log_level")) argv.push_back("--log_level=" + f->Get("log_level"));
    argv.push_back("--checkpoint_root=" + checkpoint_root);
    argv.push_back("--data_root=" + f->Get("data_root", kDefaultDataRoot));
    t.argv = argv;
    RETURN_IF_ERROR(t.process->Start(argv, t.log));
    t.started = absl::Now();
    tasks.push_back(std::move(t));
    return absl::OkStatus();
  };
  // Waits for a started task's port; from then on it restarts on that port.
  auto await_port = [&](Task* t, absl::Time deadline) -> absl::Status {
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
  };
  const absl::Time start_deadline = absl::Now() + absl::Seconds(60);
  absl::Status s;
  for (int i = 0; i < *ps && s.ok(); ++i) {
    s = start(absl::StrCat("ps:", i), {self, "ps", absl::StrCat("--task=ps:", i)});
  }
  for (int i = 0; i < *workers && s.ok(); ++i) {
    s = start(absl::StrCat("worker:", i),
              {self, "worker", absl::StrCat("--task=worker:", i), absl::StrCat("--cpu_devices=", *cpus),
               // A job that asks for the CPU keeps its workers off the GPUs.
               absl::StrCat("--gpus=", job.device() == JobSpec::CPU ? 0 : *gpus)});
  }
  // The tasks start side by side; then their addresses make the cluster.
  for (Task& t : tasks) {
    if (s.ok()) s = await_port(&t, start_deadline);
  }
  std::vector<std::string> worker_addrs, ps_addrs;
  for (const Task& t : tasks) (absl::StartsWith(t.name, "ps:") ? ps_addrs : worker_addrs).push_back(t.address);
  std::string cluster = absl::StrCat("worker=", absl::StrJoin(worker_addrs, ","));
  if (!ps_addrs.empty()) absl::StrAppend(&cluster, ";ps=", absl::StrJoin(ps_addrs, ","));
  if (s.ok()) s = start("master:0", {self, "master", "--cluster=" + cluster, "--state_dir=" + state_dir});
  if (s.ok()) s = await_port(&tasks.back(), start_deadline);
  const std::string master_addr = s.ok() ? tasks.back().address : "";
  const std::string tasks_file = log_dir + "/tasks.txt";
  if (s.ok()) s = WriteTasksFile(tasks_file, tasks);
  std::unique_ptr<MasterClient> client;
  if (s.ok()) {
    client = MasterClient::Create(master_addr, client_options);
    s = WaitUntilReady(client.get(), &tasks, *workers + *ps, absl::Seconds(60));
  }
  if (!s.ok()) {
    std::fprintf(stderr, "weft local: %s\n", std::string(s.message()).c_str());
    StopAll(&tasks);
    return 1;
  }
  std::fprintf(stderr, "weft local: master %s, cluster %s, logs in %s\n", master_addr.c_str(), cluster.c_str(),
               log_dir.c_str());
  if (!tls_flags.empty()) {
    std::fprintf(stderr, "weft local: mTLS; as its admin: WEFT_CA=%s/tls/ca.crt WEFT_CERT=%s/tls/local.crt "
                 "WEFT_KEY=%s/tls/local.key\n", log_dir.c_str(), log_dir.c_str(), log_dir.c_str());
  }
  Supervisor supervisor(&tasks, *max_restarts, tasks_file);
  supervisor.Start();

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
      rc = FollowJob(client.get(), *id, json, absl::Seconds(*master_wait));
    }
    // Wake the signal thread if no signal came, so it can be joined.
    finished = true;
    if (!stopping) ::kill(::getpid(), SIGTERM);
    signals.join();
  }
  supervisor.Stop();
  for (const Task& t : tasks) {
    const int st = t.process->exit_status();
    if (!t.given_up && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {  // a given-up task was reported then
      std::fprintf(stderr, "weft local: task %s did not stop cleanly (%s); see %s\n", t.name.c_str(),
                   DescribeExitStatus(st).c_str(), t.log.c_str());
    }
  }
  return rc;
}

}  // namespace weft
