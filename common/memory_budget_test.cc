#include "common/memory_budget.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

// A made-up root holding proc/self/cgroup and sys/fs/cgroup/... files.
class FakeRoot {
 public:
  FakeRoot() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = fs::path(tmp != nullptr ? tmp : "/tmp") /
           absl::StrCat("memory_budget_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~FakeRoot() { fs::remove_all(dir_); }
  void Write(const std::string& rel, const std::string& contents) {
    const fs::path p = dir_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << contents;
  }
  std::string path() const { return dir_.string(); }

 private:
  fs::path dir_;
};

TEST(ParseCgroupLimitTest, NumbersMaxAndGarbage) {
  EXPECT_EQ(*ParseCgroupLimit("4294967296\n"), std::optional<uint64_t>(4294967296));
  EXPECT_EQ(*ParseCgroupLimit("max\n"), std::nullopt);
  EXPECT_EQ(*ParseCgroupLimit("9223372036854771712\n"), std::nullopt);  // v1's "no limit"
  for (const char* bad : {"", "\n", "-1", "12abc", "1e9", "99999999999999999999999", "max max", "\x01\x02"}) {
    absl::StatusOr<std::optional<uint64_t>> r = ParseCgroupLimit(bad);
    ASSERT_FALSE(r.ok()) << "accepted '" << bad << "'";
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    // The bytes read are never echoed.
    if (std::string(bad).size() > 2) {
      EXPECT_EQ(std::string(r.status().message()).find(bad), std::string::npos);
    }
  }
}

TEST(CgroupMemoryLimitTest, V2TakesTheSmallestLimitAlongThePath) {
  FakeRoot root;
  root.Write("proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
  root.Write("sys/fs/cgroup/kubepods/pod1/ctr/memory.max", "max\n");
  root.Write("sys/fs/cgroup/kubepods/pod1/memory.max", "2147483648\n");
  root.Write("sys/fs/cgroup/kubepods/memory.max", "8589934592\n");
  std::string source;
  std::vector<std::string> ignored;
  std::optional<uint64_t> limit = CgroupMemoryLimit(root.path(), &source, &ignored);
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(*limit, uint64_t{2147483648});
  EXPECT_NE(source.find("kubepods/pod1/memory.max"), std::string::npos) << source;
  EXPECT_TRUE(ignored.empty()) << absl::StrJoin(ignored, "; ");
}

TEST(CgroupMemoryLimitTest, V2MaxEverywhereIsNoLimit) {
  FakeRoot root;
  root.Write("proc/self/cgroup", "0::/\n");
  root.Write("sys/fs/cgroup/memory.max", "max\n");
  std::string source;
  std::vector<std::string> ignored;
  EXPECT_EQ(CgroupMemoryLimit(root.path(), &source, &ignored), std::nullopt);
}

TEST(CgroupMemoryLimitTest, V1MemoryController) {
  FakeRoot root;
  root.Write("proc/self/cgroup", "12:cpu,cpuacct:/docker/abc\n7:memory:/docker/abc\n1:name=systemd:/docker/abc\n");
  root.Write("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "1073741824\n");
  root.Write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  std::string source;
  std::vector<std::string> ignored;
  std::optional<uint64_t> limit = CgroupMemoryLimit(root.path(), &source, &ignored);
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(*limit, uint64_t{1} << 30);
  EXPECT_NE(source.find("v1"), std::string::npos) << source;
}

TEST(CgroupMemoryLimitTest, GarbageIsIgnoredAndNamedWithoutItsBytes) {
  FakeRoot root;
  root.Write("proc/self/cgroup", "no colons here\n0::/../../etc\n0::/ok\n");
  root.Write("sys/fs/cgroup/ok/memory.max", "SECRETGARBAGE\n");
  root.Write("sys/fs/cgroup/memory.max", "536870912\n");
  std::string source;
  std::vector<std::string> ignored;
  std::optional<uint64_t> limit = CgroupMemoryLimit(root.path(), &source, &ignored);
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(*limit, uint64_t{536870912});
  ASSERT_EQ(ignored.size(), 3u) << absl::StrJoin(ignored, "; ");
  const std::string all = absl::StrJoin(ignored, "; ");
  EXPECT_NE(all.find("line 1"), std::string::npos) << all;
  EXPECT_NE(all.find("line 2"), std::string::npos) << all;
  EXPECT_NE(all.find("ok/memory.max"), std::string::npos) << all;
  EXPECT_EQ(all.find("SECRETGARBAGE"), std::string::npos) << all;
}

TEST(CgroupMemoryLimitTest, AnOversizedFileIsRefused) {
  FakeRoot root;
  root.Write("proc/self/cgroup", "0::/\n");
  root.Write("sys/fs/cgroup/memory.max", std::string(1 << 20, '1'));
  std::string source;
  std::vector<std::string> ignored;
  EXPECT_EQ(CgroupMemoryLimit(root.path(), &source, &ignored), std::nullopt);
  ASSERT_EQ(ignored.size(), 1u);
  EXPECT_NE(ignored[0].find("longer than"), std::string::npos) << ignored[0];
}

TEST(CgroupMemoryLimitTest, NoCgroupFilesIsNoLimit) {
  FakeRoot root;
  std::string source;
  std::vector<std::string> ignored;
  EXPECT_EQ(CgroupMemoryLimit(root.path(), &source, &ignored), std::nullopt);
  EXPECT_TRUE(ignored.empty());
}

TEST(DetectMemoryBudgetTest, FlagThenCgroupThenPhysicalMemory) {
  FakeRoot root;
  root.Write("proc/self/cgroup", "0::/job\n");
  root.Write("sys/fs/cgroup/job/memory.max", "1048576\n");
  MemoryBudget flag = DetectMemoryBudget(uint64_t{12345}, root.path());
  EXPECT_EQ(flag.bytes, 12345u);
  EXPECT_EQ(flag.source, "--memory_limit");
  MemoryBudget cgroup = DetectMemoryBudget(std::nullopt, root.path());
  EXPECT_EQ(cgroup.bytes, 1048576u);
  EXPECT_NE(cgroup.source.find("cgroup v2"), std::string::npos) << cgroup.source;
  root.Write("sys/fs/cgroup/job/memory.max", "max\n");
  MemoryBudget physical = DetectMemoryBudget(std::nullopt, root.path());
  EXPECT_EQ(physical.bytes, PhysicalMemoryBytes());
  EXPECT_EQ(physical.source, "physical memory");
}

TEST(ParseByteSizeTest, UnitsAndErrors) {
  EXPECT_EQ(*ParseByteSize("4096", "--memory_limit"), 4096u);
  EXPECT_EQ(*ParseByteSize("512M", "--memory_limit"), uint64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("8Gi", "--memory_limit"), uint64_t{8} << 30);
  EXPECT_EQ(*ParseByteSize("1.5G", "--memory_limit"), uint64_t{3} << 29);
  EXPECT_EQ(*ParseByteSize("2TB", "--memory_limit"), uint64_t{2} << 40);
  for (const char* bad : {"", "0", "-1G", "G", "1X", "99999999999T", "nan", "1e3"}) {
    absl::StatusOr<uint64_t> r = ParseByteSize(bad, "--memory_limit");
    ASSERT_FALSE(r.ok()) << "accepted '" << bad << "'";
    EXPECT_NE(std::string(r.status().message()).find("--memory_limit"), std::string::npos) << r.status();
  }
}

TEST(MemoryBudgetTest, SetOverridesDetection) {
  const uint64_t before = MemoryBudgetBytes();
  EXPECT_GT(before, 0u);
  SetMemoryBudget(777777);
  EXPECT_EQ(MemoryBudgetBytes(), 777777u);
  SetMemoryBudget(0);  // ignored
  EXPECT_EQ(MemoryBudgetBytes(), 777777u);
  SetMemoryBudget(before);
}

}  // namespace
}  // namespace weft
