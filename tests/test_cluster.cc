#include "tests/test_cluster.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/port_file.h"
#include "common/status_macros.h"
#include "common/test_util.h"
#include "runtime/data/test_files.h"

namespace weft {
namespace testing {

std::string WeftBinary() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir ? srcdir : ".", "/", ws ? ws : "weft", "/client/weft");
}

std::string WriteThreeClassData(const std::string& dir, int n) {
  ::mkdir(dir.c_str(), 0755);
  std::vector<uint8_t> pixels(static_cast<size_t>(n) * 12), labels(n);
  uint32_t r = 12345;
  for (int i = 0; i < n; ++i) {
    const int c = i % 3;
    labels[i] = static_cast<uint8_t>(c);
    for (int p = 0; p < 12; ++p) {
      r = r * 1103515245u + 12345u;
      pixels[static_cast<size_t>(i) * 12 + p] = static_cast<uint8_t>((p / 4 == c ? 170 : 20) + (r >> 24) % 60);
    }
  }
  for (const char* split : {"train", "t10k"}) {
    data::testing::WriteFile(absl::StrCat(dir, "/", split, "-images-idx3-ubyte.gz"),
                             data::testing::Gzip(data::testing::IdxBytes({static_cast<uint32_t>(n), 3, 4}, pixels)));
    data::testing::WriteFile(absl::StrCat(dir, "/", split, "-labels-idx1-ubyte.gz"),
                             data::testing::Gzip(data::testing::IdxBytes({static_cast<uint32_t>(n)}, labels)));
  }
  return dir;
}

std::string DaemonIdentity(const std::string& name) {
  if (name == "master") return name;
  const size_t dash = name.rfind('-');
  return absl::StrCat("/job:", name.substr(0, dash), "/task:", name.substr(dash + 1));
}

std::string LogTail(const std::string& path, int lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  const size_t from = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
  return absl::StrJoin(all.begin() + from, all.end(), "\n");
}

namespace {

// "worker-0.log" -> "worker-0.port", beside it.
std::string PortFileBeside(const std::string& log) {
  absl::string_view base = log;
  absl::ConsumeSuffix(&base, ".log");
  return absl::StrCat(base, ".port");
}

}  // namespace

TestDaemon::TestDaemon(std::string name, std::vector<std::string> args, std::string log)
    : name_(std::move(name)),
      args_(std::move(args)),
      log_(std::move(log)),
      port_file_(PortFileBeside(log_)),
      process_(std::make_unique<Subprocess>()) {}

std::string TestDaemon::address() const { return absl::StrCat("127.0.0.1:", port_); }

absl::Status TestDaemon::Start(absl::Duration timeout) {
  RETURN_IF_ERROR(Launch());
  return AwaitPort(timeout);
}

absl::Status TestDaemon::Launch() { return LaunchOn(0); }

absl::Status TestDaemon::LaunchOn(int port) {
  std::vector<std::string> argv = {WeftBinary()};
  argv.insert(argv.end(), args_.begin(), args_.end());
  argv.push_back(absl::StrCat("--listen=127.0.0.1:", port));
  argv.push_back("--port_file=" + port_file_);
  // An earlier process's file must not answer for this one.
  if (std::remove(port_file_.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat("cannot remove ", name_, "'s old port file ", port_file_));
  }
  absl::Status s = process_->Start(argv, log_);
  if (!s.ok()) return absl::InternalError(absl::StrCat("cannot start ", name_, ": ", s.message()));
  return absl::OkStatus();
}

absl::Status TestDaemon::AwaitPort(absl::Duration timeout) {
  absl::StatusOr<int> port = WaitForPortFile(process_.get(), port_file_, absl::Now() + timeout);
  if (!port.ok()) {
    return absl::Status(port.status().code(),
                        absl::StrCat(name_, " did not start: ", port.status().message(), "\n--- the end of its log, ",
                                     log_, ":\n", LogTail(log_)));
  }
  port_ = *port;
  return absl::OkStatus();
}

absl::Status TestDaemon::Restart(absl::Duration timeout) {
  if (port_ == 0) return absl::FailedPreconditionError(absl::StrCat(name_, " never started; nothing to restart"));
  if (process_->Running()) return absl::FailedPreconditionError(absl::StrCat(name_, " is still running"));
  const int before = port_;
  RETURN_IF_ERROR(LaunchOn(before));
  absl::Status s = AwaitPort(timeout);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("restarting ", name_, " on the port it had, ", before,
                                               " (taken by another process meanwhile?): ", s.message()));
  }
  if (port_ != before) {
    return absl::InternalError(absl::StrCat(name_, " was restarted on port ", before, " but reports port ", port_));
  }
  return absl::OkStatus();
}

absl::Status TestDaemon::CheckRunning() {
  if (process_->Running()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(name_, " exited (", DescribeExitStatus(process_->exit_status()),
                                                    ")\n--- the end of its log, ", log_, ":\n", LogTail(log_)));
}

::testing::AssertionResult WaitForCluster(MasterClient* client, int num_tasks, const std::vector<TestDaemon*>& daemons,
                                          absl::Duration timeout) {
  std::string last = "no answer yet";
  ::testing::AssertionResult up =
      WaitUntil(timeout, absl::StrCat("the master to list the devices of ", num_tasks, " task(s)"),
                [&]() -> absl::StatusOr<bool> {
                  for (TestDaemon* d : daemons) RETURN_IF_ERROR(d->CheckRunning());
                  absl::StatusOr<std::vector<DeviceAttributes>> devices = client->ListDevices();
                  if (!devices.ok()) {
                    last = devices.status().ToString();
                    return false;
                  }
                  std::set<std::string> tasks;
                  for (const DeviceAttributes& d : *devices) {
                    tasks.insert(d.name().substr(0, d.name().find("/device:")));
                  }
                  last = absl::StrCat("the master lists ", tasks.size(), ": ", absl::StrJoin(tasks, ", "));
                  return static_cast<int>(tasks.size()) >= num_tasks;
                });
  if (!up) up << " (last: " << last << ")";
  return up;
}

JobStatus WatchJobToEnd(MasterClient* client, const std::string& id, absl::Duration timeout,
                        const std::function<void(const JobStatus&)>& on_status) {
  absl::Notification ended;
  std::atomic<bool> timed_out{false};
  // The watch blocks on the stream; a job that never ends is cancelled, so
  // the master ends the stream and the test reports it.
  std::thread watchdog([&] {
    if (!ended.WaitForNotificationWithTimeout(timeout)) {
      timed_out = true;
      client->CancelJob(id).IgnoreError();
    }
  });
  JobStatus last;
  absl::Status s = client->WatchJob(id, [&](const JobStatus& st) {
    last = st;
    if (on_status) on_status(st);
  });
  ended.Notify();
  watchdog.join();
  EXPECT_TRUE(s.ok()) << "watching job " << id << ": " << s;
  EXPECT_FALSE(timed_out) << "job " << id << " still ran after " << timeout << " and was cancelled: "
                          << last.DebugString();
  return last;
}

JobStatus PollJobUntil(MasterClient* client, const std::string& id, absl::Duration timeout, const std::string& what,
                       const std::function<bool(const JobStatus&)>& until) {
  JobStatus last;
  EXPECT_TRUE(WaitUntil(timeout, absl::StrCat("job ", id, " to reach ", what), [&]() -> absl::StatusOr<bool> {
    ASSIGN_OR_RETURN(last, client->GetJob(id));
    const JobState s = last.state();
    return until(last) || s == SUCCEEDED || s == FAILED || s == CANCELLED;
  })) << last.DebugString();
  return last;
}

void ExpectStopsOnSigterm(TestDaemon* daemon, absl::Duration timeout) {
  Subprocess* p = daemon->process();
  if (p == nullptr || !p->Running()) return;
  p->Signal(SIGTERM);
  if (!p->WaitFor(timeout)) {
    ADD_FAILURE() << daemon->name() << " did not stop on SIGTERM";
    return;
  }
  EXPECT_TRUE(WIFEXITED(p->exit_status()) && WEXITSTATUS(p->exit_status()) == 0)
      << daemon->name() << " " << DescribeExitStatus(p->exit_status());
}

}  // namespace testing
}  // namespace weft
