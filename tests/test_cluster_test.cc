// The daemon helpers themselves: a daemon on port 0 reports its port, comes
// back on it after a kill, and every failure names the daemon, how it ended
// and its log (a bad data-plane flag's among them).
#include "tests/test_cluster.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/data/test_files.h"

namespace weft {
namespace testing {
namespace {

using data::testing::TempPath;

std::vector<std::string> WorkerArgs(const std::string& task) {
  return {"worker", "--task=" + task, "--insecure", "--data_root=" + ::testing::TempDir(),
          "--checkpoint_root=" + ::testing::TempDir()};
}

// Listens on 127.0.0.1:port until destroyed: a process that took the port.
class PortHolder {
 public:
  explicit PortHolder(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    ok_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && ::listen(fd_, 1) == 0;
  }
  ~PortHolder() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return ok_; }
  // The port bound (the one given, or the kernel's choice for 0).
  int port() const {
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
    return ntohs(addr.sin_port);
  }

 private:
  const int fd_;
  bool ok_ = false;
};

TEST(TestDaemonTest, ReportsItsPortAndRestartsOnIt) {
  TestDaemon d("worker-0", WorkerArgs("worker:0"), TempPath("restart-worker-0.log"));
  absl::Status s = d.Start();
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_GT(d.port(), 0);
  EXPECT_EQ(d.address(), absl::StrCat("127.0.0.1:", d.port()));
  EXPECT_TRUE(d.CheckRunning().ok());
  const int port = d.port();

  d.process()->Signal(SIGKILL);
  ASSERT_TRUE(d.process()->WaitFor(absl::Seconds(30))) << "worker-0 outlived SIGKILL";
  absl::Status gone = d.CheckRunning();
  EXPECT_TRUE(absl::StrContains(gone.message(), "worker-0 exited (killed by signal 9)")) << gone;
  {
    // Another process took the port meanwhile: the restart says so.
    PortHolder holder(port);
    ASSERT_TRUE(holder.ok()) << "cannot hold port " << port;
    absl::Status taken = d.Restart();
    EXPECT_FALSE(taken.ok());
    EXPECT_TRUE(absl::StrContains(taken.message(), absl::StrCat("restarting worker-0 on the port it had, ", port)))
        << taken;
    EXPECT_TRUE(absl::StrContains(taken.message(), TempPath("restart-worker-0.log"))) << taken;
    EXPECT_TRUE(absl::StrContains(taken.message(), absl::StrCat("could not listen on 127.0.0.1:", port))) << taken;
  }
  // Free again: it comes back at its address.
  s = d.Restart();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(d.port(), port);
  d.process()->Terminate(absl::Seconds(30));
}

TEST(TestDaemonTest, ADaemonThatExitsAtStartNamesItselfAndItsLog) {
  const std::string log = TempPath("bad-worker.log");
  TestDaemon d("worker-7", {"worker", "--task=worker:x", "--insecure"}, log);
  absl::Status s = d.Start();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), "worker-7 did not start")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "exit status 2")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), log)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "task index 'x'")) << s;  // the log's end, quoted
}

// The data plane's flags: a bad value, or a collective port another
// process holds, stops the worker at start, naming the flag.
TEST(TestDaemonTest, BadDataPlaneFlagsStopTheWorkerNamingThem) {
  PortHolder held(0);  // another process's port: any free one
  ASSERT_TRUE(held.ok());
  const int taken_port = held.port();
  struct Case {
    std::string flag;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"--shared_memory=maybe", "--shared_memory must be true or false, not 'maybe'"},
      {"--collective_transport=udp", "--collective_transport must be socket or grpc, not 'udp'"},
      {"--collective_port=70000", "collective_port"},
      {absl::StrCat("--collective_port=", taken_port), absl::StrCat("--collective_port=", taken_port)},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = WorkerArgs("worker:0");
    args.push_back(c.flag);
    const std::string log = TempPath("bad-flag-worker.log");
    TestDaemon d("worker-0", args, log);
    absl::Status s = d.Start();
    ASSERT_FALSE(s.ok()) << c.flag << " was accepted";
    EXPECT_TRUE(absl::StrContains(s.message(), "worker-0 did not start")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), c.says)) << c.flag << ": " << s;
  }
}

}  // namespace
}  // namespace testing
}  // namespace weft
