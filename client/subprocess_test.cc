#include "client/subprocess.h"

#include <signal.h>
#include <sys/wait.h>

#include <fstream>

#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(SubprocessTest, RunsAndReportsExitStatus) {
  Subprocess p;
  ASSERT_TRUE(p.Start({"/bin/sh", "-c", "exit 3"}).ok());
  ASSERT_TRUE(p.WaitFor(absl::Seconds(30)));
  ASSERT_TRUE(WIFEXITED(p.exit_status()));
  EXPECT_EQ(WEXITSTATUS(p.exit_status()), 3);
}

TEST(SubprocessTest, TerminateEscalatesToKill) {
  Subprocess p;
  const std::string log = ::testing::TempDir() + "/ignores_term.log";
  std::remove(log.c_str());
  // Ignores SIGTERM once it says so: only SIGKILL stops it.
  ASSERT_TRUE(p.Start({"/bin/sh", "-c", "trap '' TERM; echo ready; while true; do sleep 1; done"}, log).ok());
  std::string line;
  for (int i = 0; i < 3000 && line != "ready"; ++i) {  // bounded wait for the trap to be in place
    std::ifstream in(log);
    std::getline(in, line);
    if (line != "ready") ASSERT_TRUE(p.WaitFor(absl::Milliseconds(10)) == false) << "child exited early";
  }
  ASSERT_EQ(line, "ready");
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
  ASSERT_TRUE(p.WaitFor(absl::Seconds(30)));
  std::ifstream in(log);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "value=42");
}

TEST(SubprocessTest, MissingBinaryExits127) {
  Subprocess p;
  ASSERT_TRUE(p.Start({"/nonexistent/binary"}).ok());
  ASSERT_TRUE(p.WaitFor(absl::Seconds(30)));
  EXPECT_EQ(WEXITSTATUS(p.exit_status()), 127);
}

TEST(SubprocessTest, PicksDistinctUsablePorts) {
  auto a = PickFreeLoopbackPort();
  auto b = PickFreeLoopbackPort();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(*a, 0);
  EXPECT_LT(*a, 65536);
}

}  // namespace
}  // namespace weft
