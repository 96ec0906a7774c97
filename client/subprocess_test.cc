#include "client/subprocess.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(SubprocessTest, RunsAndReportsExitStatus) {
  Subprocess p;
  ASSERT_TRUE(p.Start({"/bin/sh", "-c", "exit 3"}).ok());
  ASSERT_TRUE(p.WaitFor(absl::Seconds(30))) << "the child did not exit in 30 s";
  ASSERT_TRUE(WIFEXITED(p.exit_status()));
  EXPECT_EQ(WEXITSTATUS(p.exit_status()), 3);
}

TEST(SubprocessTest, TerminateEscalatesToKill) {
  Subprocess p;
  const std::string log = ::testing::TempDir() + "/ignores_term.log";
  std::remove(log.c_str());
  // Ignores SIGTERM once it says so: only SIGKILL stops it.
  ASSERT_TRUE(p.Start({"/bin/sh", "-c", "trap '' TERM; echo ready; while true; do sleep 1; done"}, log).ok());
  ASSERT_TRUE(weft::testing::WaitUntil(weft::testing::kWaitTimeout, "the child to trap SIGTERM",
                                       [&]() -> absl::StatusOr<bool> {
                                         if (!p.Running()) return absl::InternalError("the child exited early");
                                         std::ifstream in(log);
                                         std::string line;
                                         std::getline(in, line);
                                         return line == "ready";
                                       }));
  EXPECT_TRUE(p.Running());
  p.Terminate(absl::Milliseconds(200));
  EXPECT_FALSE(p.Running());
  ASSERT_TRUE(WIFSIGNALED(p.exit_status()));
  EXPECT_EQ(WTERMSIG(p.exit_status()), SIGKILL);
}

TEST(SubprocessTest, WritesOutputAndEnvironmentToTheLog) {
  const std::string log = ::testing::TempDir() + "/subprocess.log";
  std::remove(log.c_str());
  Subprocess p;
  ASSERT_TRUE(p.Start({"/bin/sh", "-c", "echo value=$WEFT_TEST_VALUE"}, log, {"WEFT_TEST_VALUE=42"}).ok());
  ASSERT_TRUE(p.WaitFor(absl::Seconds(30))) << "the child did not exit in 30 s";
  std::ifstream in(log);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "value=42");
}

TEST(SubprocessTest, RestartRunsTheSameCommandAndAppendsToTheLog) {
  const std::string log = ::testing::TempDir() + "/restart.log";
  {
    std::ofstream old(log);
    old << "from before\n";  // a log of an earlier run is kept, not truncated
  }
  Subprocess p;
  EXPECT_FALSE(p.Restart().ok());  // nothing to restart yet
  ASSERT_TRUE(p.Start({"/bin/sh", "-c", "echo run $$"}, log).ok());
  const pid_t first = p.pid();
  ASSERT_TRUE(p.WaitFor(absl::Seconds(30))) << "the child did not exit in 30 s";
  ASSERT_TRUE(p.Restart().ok());
  EXPECT_NE(p.pid(), first);
  ASSERT_TRUE(p.WaitFor(absl::Seconds(30))) << "the child did not exit in 30 s";
  EXPECT_TRUE(WIFEXITED(p.exit_status()));
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "from before");
  EXPECT_EQ(lines[1], "run " + std::to_string(first));
  EXPECT_EQ(lines[2], "run " + std::to_string(p.pid()));
}

TEST(SubprocessTest, RestartRefusesWhileTheChildRuns) {
  Subprocess p;
  ASSERT_TRUE(p.Start({"/bin/sh", "-c", "sleep 30"}).ok());
  EXPECT_EQ(p.Restart().code(), absl::StatusCode::kFailedPrecondition);
  p.Terminate(absl::Seconds(5));
}

TEST(SubprocessTest, ChildLeadsItsOwnProcessGroup) {
  Subprocess p;
  ASSERT_TRUE(p.Start({"/bin/sh", "-c", "sleep 30"}).ok());
  // Start sets the group in the parent too, so it holds when Start returns.
  EXPECT_EQ(::getpgid(p.pid()), p.pid());
  EXPECT_NE(::getpgid(p.pid()), ::getpgrp());
  p.Terminate(absl::Seconds(5));
}

TEST(SubprocessTest, DescribesExitStatuses) {
  Subprocess killed;
  ASSERT_TRUE(killed.Start({"/bin/sh", "-c", "kill -9 $$"}).ok());
  ASSERT_TRUE(killed.WaitFor(absl::Seconds(30))) << "the child did not exit in 30 s";
  EXPECT_EQ(DescribeExitStatus(killed.exit_status()), "killed by signal 9");
  Subprocess failed;
  ASSERT_TRUE(failed.Start({"/bin/sh", "-c", "exit 1"}).ok());
  ASSERT_TRUE(failed.WaitFor(absl::Seconds(30))) << "the child did not exit in 30 s";
  EXPECT_EQ(DescribeExitStatus(failed.exit_status()), "exit status 1");
}

TEST(SubprocessTest, MissingBinaryExits127) {
  Subprocess p;
  ASSERT_TRUE(p.Start({"/nonexistent/binary"}).ok());
  ASSERT_TRUE(p.WaitFor(absl::Seconds(30))) << "the child did not exit in 30 s";
  EXPECT_EQ(WEXITSTATUS(p.exit_status()), 127);
}

}  // namespace
}  // namespace weft
