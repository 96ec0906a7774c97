#include "client/flags.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

absl::StatusOr<Flags> ParseArgs(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return Flags::Parse(static_cast<int>(argv.size()), argv.data(), 0, {"master", "output", "workers"}, {"follow"});
}

TEST(FlagsTest, ValuedBooleanAndPositional) {
  auto f = ParseArgs({"job.pbtxt", "--master", "127.0.0.1:5000", "--follow", "--output=json", "--workers=3"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->args(), std::vector<std::string>{"job.pbtxt"});
  EXPECT_EQ(f->Get("master"), "127.0.0.1:5000");
  EXPECT_TRUE(f->GetBool("follow"));
  EXPECT_EQ(f->Get("output"), "json");
  EXPECT_EQ(*f->GetInt("workers", 1, 0, 64), 3);
  EXPECT_EQ(*f->GetInt("missing", 7, 0, 64), 7);
}

TEST(FlagsTest, ErrorsNameTheFlag) {
  auto unknown = ParseArgs({"--mastr=x"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_TRUE(absl::StrContains(unknown.status().message(), "--mastr")) << unknown.status();
  EXPECT_FALSE(ParseArgs({"--master"}).ok());             // value missing
  EXPECT_FALSE(ParseArgs({"--follow=maybe"}).ok());       // boolean with a value
  auto range = ParseArgs({"--workers=100"});
  ASSERT_TRUE(range.ok());
  auto v = range->GetInt("workers", 1, 0, 64);
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(absl::StrContains(v.status().message(), "--workers=100")) << v.status();
}

TEST(FlagsTest, HelpListsEveryFlagOnePerLine) {
  // deploy/check/crossref.py parses these lines: keep the format.
  EXPECT_EQ(Flags::HelpText("weft submit", {"master", "output"}, {"follow", "insecure"}),
            "usage: weft submit [FLAGS] [ARGS]\n"
            "flags (--name=VALUE takes a value, a bare --name is a boolean):\n"
            "  --follow\n"
            "  --insecure\n"
            "  --master=VALUE\n"
            "  --output=VALUE\n");
}

// Runs Parse in a death-test child with stdout sent to stderr, where
// EXPECT_EXIT can match it.
void ParseWithStdoutOnStderr(std::vector<std::string> args) {
  std::fflush(stdout);
  dup2(STDERR_FILENO, STDOUT_FILENO);
  (void)ParseArgs(std::move(args));
}

TEST(FlagsTest, HelpPrintsTheFlagsAndExitsZero) {
  EXPECT_EXIT(ParseWithStdoutOnStderr({"job.pbtxt", "--mastr=typo", "--help"}), ::testing::ExitedWithCode(0),
              "usage: weft \\[FLAGS\\].*  --follow\n  --master=VALUE\n  --output=VALUE\n  --workers=VALUE\n");
}

TEST(FlagsTest, HelpAsAValueOrAfterDoubleDashIsNotAFlag) {
  auto value = ParseArgs({"--master", "--help"});
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->Get("master"), "--help");
  auto positional = ParseArgs({"--", "--help"});
  ASSERT_TRUE(positional.ok()) << positional.status();
  EXPECT_EQ(positional->args(), std::vector<std::string>{"--help"});
}

}  // namespace
}  // namespace weft
