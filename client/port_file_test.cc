#include "client/port_file.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

std::string Dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

int NumFiles(const std::string& dir) {
  int n = 0;
  DIR* d = ::opendir(dir.c_str());
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

TEST(PortFileTest, WritesAndReadsBackAPort) {
  const std::string dir = Dir("round_trip");
  const std::string path = dir + "/worker-0.port";
  ASSERT_TRUE(WritePortFile(path, 40123).ok());
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "40123\n");
  EXPECT_EQ(ReadPortFile(path).value(), 40123);
  // A second write replaces the file whole, leaving no temporary behind.
  ASSERT_TRUE(WritePortFile(path, 2222).ok());
  EXPECT_EQ(ReadPortFile(path).value(), 2222);
  EXPECT_EQ(NumFiles(dir), 1);
}

TEST(PortFileTest, MissingIsNotFoundAndGarbageIsRefusedNamingTheFile) {
  const std::string dir = Dir("bad");
  EXPECT_EQ(ReadPortFile(dir + "/none.port").status().code(), absl::StatusCode::kNotFound);
  for (const char* text : {"", "123", "0\n", "70000\n", "12x\n", "-5\n"}) {
    const std::string path = dir + "/bad.port";
    std::ofstream(path, std::ios::trunc) << text;
    auto port = ReadPortFile(path);
    EXPECT_EQ(port.status().code(), absl::StatusCode::kInvalidArgument) << "'" << text << "': " << port.status();
    EXPECT_TRUE(absl::StrContains(port.status().message(), path)) << port.status();
  }
}

TEST(PortFileTest, AnUnwritableDirectoryIsAnErrorNamingTheFile) {
  absl::Status s = WritePortFile("/nonexistent-dir/x.port", 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "/nonexistent-dir/x.port")) << s;
}

TEST(PortFileTest, WaitsForTheProcessToWriteIt) {
  const std::string path = Dir("wait") + "/late.port";
  std::remove(path.c_str());
  Subprocess p;
  // Writes the file as a daemon does: whole, under another name, renamed.
  const std::string script = "sleep 0.2; echo 31337 > \"$0.tmp\"; mv \"$0.tmp\" \"$0\"; sleep 30";
  ASSERT_TRUE(p.Start({"/bin/sh", "-c", script, path}).ok());
  auto port = WaitForPortFile(&p, path, absl::Now() + absl::Seconds(60));
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(*port, 31337);
  p.Terminate(absl::Seconds(5));
}

TEST(PortFileTest, AProcessThatExitsFirstFailsTheWaitSayingHow) {
  const std::string path = Dir("exits") + "/never.port";
  std::remove(path.c_str());
  Subprocess p;
  ASSERT_TRUE(p.Start({"/bin/sh", "-c", "exit 3"}).ok());
  auto port = WaitForPortFile(&p, path, absl::Now() + absl::Seconds(60));
  EXPECT_EQ(port.status().code(), absl::StatusCode::kFailedPrecondition) << port.status();
  EXPECT_TRUE(absl::StrContains(port.status().message(), "exit status 3")) << port.status();
  EXPECT_TRUE(absl::StrContains(port.status().message(), path)) << port.status();
}

TEST(PortFileTest, TheDeadlineEndsTheWait) {
  const std::string path = Dir("silent") + "/silent.port";
  std::remove(path.c_str());
  Subprocess p;
  ASSERT_TRUE(p.Start({"/bin/sh", "-c", "sleep 30"}).ok());
  auto port = WaitForPortFile(&p, path, absl::Now() + absl::Milliseconds(100));
  EXPECT_EQ(port.status().code(), absl::StatusCode::kDeadlineExceeded) << port.status();
  EXPECT_TRUE(absl::StrContains(port.status().message(), path)) << port.status();
  p.Terminate(absl::Seconds(5));
}

}  // namespace
}  // namespace weft
