#include "common/test_util.h"

#include <atomic>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace weft {
namespace testing {
namespace {

TEST(WaitUntilTest, ReturnsOnceThePredicateHolds) {
  std::atomic<bool> set{false};
  std::thread setter([&] { set = true; });
  EXPECT_TRUE(WaitUntil(kWaitTimeout, "the flag", [&] { return set.load(); }));
  setter.join();
}

TEST(WaitUntilTest, ATimeoutNamesWhatItWaitedFor) {
  ::testing::AssertionResult r = WaitUntil(absl::Milliseconds(20), "the moon to turn blue", [] { return false; });
  ASSERT_FALSE(r);
  EXPECT_TRUE(absl::StrContains(r.message(), "timed out after 20ms waiting for the moon to turn blue")) << r.message();
}

TEST(WaitUntilTest, AnErrorStopsTheWaitWithIt) {
  int calls = 0;
  ::testing::AssertionResult r = WaitUntil(kWaitTimeout, "the daemon", [&]() -> absl::StatusOr<bool> {
    if (++calls < 3) return false;
    return absl::FailedPreconditionError("worker-0 exited (exit status 1)");
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(absl::StrContains(r.message(), "stopped waiting for the daemon")) << r.message();
  EXPECT_TRUE(absl::StrContains(r.message(), "worker-0 exited (exit status 1)")) << r.message();
}

TEST(TestSeedTest, OneSeedPerRunAndOneStreamPerTest) {
  EXPECT_EQ(TestSeed(), TestSeed());
  std::mt19937_64 a = TestRng();
  std::mt19937_64 b = TestRng();
  EXPECT_EQ(a(), b());  // the same test draws the same numbers
}

}  // namespace
}  // namespace testing
}  // namespace weft
