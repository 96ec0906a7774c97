#include "common/token_table.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

constexpr char kAlice[] = "alice-token-0123456789abcdef";
constexpr char kRoot[] = "root-token-0123456789abcdef00";

std::string WriteFile(const std::string& name, const std::string& text, mode_t mode) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  unlink(path.c_str());
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
  return path;
}

TEST(TokenTableTest, LooksUpUsersAndRoles) {
  auto t = TokenTable::FromText(std::string("# comment\n\n") + kAlice + " alice user\n" + kRoot + "\troot admin\n", "t");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->size(), 2u);
  auto alice = (*t)->Lookup(kAlice);
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ(alice->user, "alice");
  EXPECT_FALSE(alice->admin);
  auto root = (*t)->Lookup(kRoot);
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->user, "root");
  EXPECT_TRUE(root->admin);
  // A prefix, a longer string and an empty one are all unknown, and the
  // error does not echo the token.
  for (const std::string& bad : {std::string(kAlice).substr(0, 20), std::string(kAlice) + "x", std::string()}) {
    auto r = (*t)->Lookup(bad);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated);
    if (!bad.empty()) {
      EXPECT_FALSE(absl::StrContains(r.status().message(), bad));
    }
  }
}

TEST(TokenTableTest, RefusesBadLinesNamingTheLine) {
  struct Case {
    std::string text;
    std::string want;
  };
  for (const Case& c : std::vector<Case>{
           {std::string(kAlice) + " alice\n", "t:1: expected 'TOKEN USER ROLE'"},
           {"short alice user\n", "t:1: the token is shorter"},
           {std::string("\n") + kAlice + " alice owner\n", "t:2: role 'owner'"},
           {std::string(kAlice) + " master admin\n", "reserved for the cluster"},
           {std::string(kAlice) + " a user\n" + kAlice + " b user\n", "t:2: the token is listed twice"},
           {"alice-token-01234567\"89 alice user\n", "character outside"},
       }) {
    auto t = TokenTable::FromText(c.text, "t");
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(t.status().message(), c.want)) << t.status();
  }
}

TEST(TokenTableTest, RefusesAFileOthersCanRead) {
  const std::string path = WriteFile("open_tokens", std::string(kAlice) + " alice user\n", 0644);
  auto t = TokenTable::Load(path);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::StrContains(t.status().message(), "open to other users")) << t.status();
  // A Kubernetes Secret mount: readable by the pod's group only.
  EXPECT_TRUE(TokenTable::Load(WriteFile("group_tokens", std::string(kAlice) + " alice user\n", 0440)).ok());
}

TEST(TokenTableTest, RereadsTheFileWhenItChanges) {
  const std::string path = WriteFile("tokens", std::string(kAlice) + " alice user\n", 0600);
  auto t = TokenTable::Load(path);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE((*t)->Lookup(kAlice).ok());
  // Revoke alice, add root. The file's size changes, so the change is seen
  // even within the file system's timestamp granularity.
  {
    std::ofstream(path, std::ios::trunc) << kRoot << " root admin\n# revoked alice\n";
  }
  // Checked at most once a second: poll, bounded.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((*t)->Lookup(kAlice).ok() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE((*t)->Lookup(kAlice).ok()) << "the revoked token still works after 10 s";
  EXPECT_TRUE((*t)->Lookup(kRoot).ok());
  // A broken file keeps the last good table.
  { std::ofstream(path, std::ios::trunc) << "garbage\n"; }
  absl::SleepFor(absl::Milliseconds(1100));
  EXPECT_TRUE((*t)->Lookup(kRoot).ok());
}

}  // namespace
}  // namespace weft
