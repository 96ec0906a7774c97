#include "master/step_times.h"

#include "gtest/gtest.h"

namespace weft {
namespace master {
namespace {

TaskStepTime Time(const std::string& task, double p50, int steps = 10) {
  TaskStepTime t;
  t.set_task(task);
  t.set_p50_seconds(p50);
  t.set_steps(steps);
  return t;
}

TEST(StepTimesTest, PercentilesAreNearestRanksOfTheRecentWindow) {
  EXPECT_EQ(Percentile({}, 0.5), 0);
  EXPECT_EQ(Percentile({3, 1, 2}, 0.5), 2);
  EXPECT_EQ(Percentile({3, 1, 2, 4}, 0.5), 2);
  EXPECT_EQ(Median({3, 1, 2, 4}), 2.5);
  StepTimes times;
  // 200 times: only the last kStepTimeWindow (72..199 ms) count.
  for (int i = 0; i < 200; ++i) times.Add("/job:worker/task:0", i / 1000.0);
  times.Add("/job:ps/task:0", 0.5);
  std::vector<TaskStepTime> s = times.Summaries({});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].task(), "/job:ps/task:0");  // sorted by task
  EXPECT_EQ(s[0].steps(), 1);
  EXPECT_EQ(s[1].steps(), kStepTimeWindow);
  EXPECT_DOUBLE_EQ(s[1].p50_seconds(), (72 + 63) / 1000.0);
  EXPECT_DOUBLE_EQ(s[1].p99_seconds(), (72 + 126) / 1000.0);
}

TEST(StepTimesTest, AStragglerIsWellAboveTheOtherPeersMedian) {
  std::vector<TaskStepTime> t = {Time("w0", 0.100), Time("w1", 0.110), Time("w2", 0.180), Time("ps", 0.9)};
  MarkStragglers({"w0", "w1", "w2"}, &t);
  EXPECT_FALSE(t[0].straggler());
  EXPECT_FALSE(t[1].straggler());
  EXPECT_TRUE(t[2].straggler());   // 0.18 > 1.5 x 0.105
  EXPECT_FALSE(t[3].straggler());  // not a peer: the ps waits on every worker
  // Two of three slow: the typical task is slow, no one straggles.
  t = {Time("w0", 0.1), Time("w1", 0.3), Time("w2", 0.3)};
  MarkStragglers({}, &t);
  for (const TaskStepTime& x : t) EXPECT_FALSE(x.straggler()) << x.task();
  // Two tasks: the slower one straggles against the other.
  t = {Time("w0", 0.1), Time("w1", 0.2)};
  MarkStragglers({}, &t);
  EXPECT_FALSE(t[0].straggler());
  EXPECT_TRUE(t[1].straggler());
}

TEST(StepTimesTest, TooFewStepsOrSubMillisecondGapsFlagNoOne) {
  std::vector<TaskStepTime> t = {Time("w0", 0.1), Time("w1", 0.5, kStragglerMinSteps - 1)};
  MarkStragglers({}, &t);
  EXPECT_FALSE(t[1].straggler());
  t = {Time("w0", 0.0002), Time("w1", 0.0009)};
  MarkStragglers({}, &t);
  EXPECT_FALSE(t[1].straggler());
  t = {Time("w0", 0.1)};
  MarkStragglers({}, &t);
  EXPECT_FALSE(t[0].straggler());
}

}  // namespace
}  // namespace master
}  // namespace weft
