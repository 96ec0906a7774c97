#include "worker/pull_deadlines.h"

#include <atomic>
#include <memory>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace weft {
namespace worker {
namespace {

TEST(PullDeadlinesTest, AnUnfinishedWaitExpiresAndAFinishedOneDoesNot) {
  PullDeadlines deadlines(absl::Milliseconds(20));
  std::atomic<int> finished_expired{0};
  auto expired = std::make_shared<absl::Notification>();
  deadlines.Add([] { return true; }, [&] { ++finished_expired; });
  deadlines.Add([] { return false; }, [expired] { expired->Notify(); });
  ASSERT_TRUE(expired->WaitForNotificationWithTimeout(absl::Seconds(60)));
  // The finished wait's deadline came first, so it was decided by now.
  EXPECT_EQ(finished_expired.load(), 0);
  EXPECT_EQ(deadlines.size(), 0u);
}

TEST(PullDeadlinesTest, FinishedWaitsDoNotPileUp) {
  PullDeadlines deadlines(absl::Hours(1));
  for (int i = 0; i < 100; ++i) deadlines.Add([] { return true; }, [] { ADD_FAILURE() << "expired"; });
  EXPECT_EQ(deadlines.size(), 1u);  // each Add dropped the one before

  // A wait that does not finish at the front: the ones behind it are swept.
  auto stuck = std::make_shared<std::atomic<bool>>(false);
  PullDeadlines behind(absl::Hours(1));
  behind.Add([stuck] { return stuck->load(); }, [] {});
  for (size_t i = 0; i < 3 * PullDeadlines::kSweepAt; ++i) behind.Add([] { return true; }, [] {});
  EXPECT_LT(behind.size(), PullDeadlines::kSweepAt + 1);
  EXPECT_GE(behind.size(), 1u);
  stuck->store(true);
  behind.Add([] { return true; }, [] {});
  EXPECT_LE(behind.size(), PullDeadlines::kSweepAt);
}

TEST(PullDeadlinesTest, DestroyingItRunsNothingQueued) {
  bool ran = false;
  {
    PullDeadlines deadlines(absl::Hours(1));
    deadlines.Add([] { return false; }, [&] { ran = true; });
  }
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace worker
}  // namespace weft
