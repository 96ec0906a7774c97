#include "runtime/training_loop.h"

#include <chrono>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/data/dataset.h"

namespace weft {
namespace {

using Clock = std::chrono::steady_clock;

// A StepSource on a clock that each call of steps moves by the seconds the
// test gives it, so the loop's throughput is exact.
struct FakeRun {
  std::vector<double> call_seconds;  // the i-th call takes call_seconds[i] (the last repeats)
  int64_t batch = 10;
  int calls = 0;
  Clock::time_point clock = Clock::time_point() + std::chrono::hours(1);

  StepSource Source(int64_t per_epoch, int64_t steps_per_call) {
    StepSource s;
    s.examples = per_epoch * batch;
    s.batches_per_epoch = per_epoch;
    s.now = [this] { return clock; };
    s.step = [this, steps_per_call](int64_t max_steps) -> absl::StatusOr<StepResult> {
      const double sec = call_seconds[std::min<size_t>(calls, call_seconds.size() - 1)];
      ++calls;
      clock += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(sec));
      const int64_t n = std::min(steps_per_call, max_steps);
      return StepResult{0.5f, n * batch, n};
    };
    return s;
  }
};

JobSpec Job(int epochs) {
  JobSpec job;
  job.set_name("loop");
  job.set_epochs(epochs);
  job.set_batch_size(10);
  job.mutable_eval()->set_skip(true);
  return job;
}

TEST(TrainingLoopTest, TheFirstCallIsWarmUpAndLeftOutOfTheThroughput) {
  FakeRun run;
  run.call_seconds = {7.0, 0.5};  // setup-heavy first call, then half a second a call
  const StepSource source = run.Source(/*per_epoch=*/8, /*steps_per_call=*/2);
  auto r = RunTrainingLoop(Job(2), source, nullptr, nullptr, Clock::now());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps, 16);
  EXPECT_EQ(run.calls, 8);
  EXPECT_DOUBLE_EQ(r->warmup_seconds, 7.0);
  // 7 calls after the first: 14 steps of 10 examples in 3.5 s.
  EXPECT_NEAR(r->samples_per_second, 140 / 3.5, 1e-9);
}

TEST(TrainingLoopTest, ARunOfOneCallCountsThatCall) {
  FakeRun run;
  run.call_seconds = {4.0};
  const StepSource source = run.Source(/*per_epoch=*/3, /*steps_per_call=*/8);
  auto r = RunTrainingLoop(Job(1), source, nullptr, nullptr, Clock::now());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(run.calls, 1);
  EXPECT_EQ(r->warmup_seconds, 0);
  EXPECT_NEAR(r->samples_per_second, 30 / 4.0, 1e-9);
}

TEST(TrainingLoopTest, ProgressReportsTheThroughputAfterWarmUp) {
  FakeRun run;
  run.call_seconds = {9.0, 1.0};
  const StepSource source = run.Source(/*per_epoch=*/4, /*steps_per_call=*/1);
  std::vector<double> seen;
  std::function<void(const TrainProgress&)> progress = [&](const TrainProgress& p) {
    if (!p.epoch_end) seen.push_back(p.samples_per_second);
  };
  auto r = RunTrainingLoop(Job(1), source, progress, nullptr, Clock::now());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0], 0);  // nothing timed yet
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_NEAR(seen[i], 10.0, 1e-9) << i;
  EXPECT_NEAR(r->samples_per_second, 10.0, 1e-9);
}

// With next_batch, each step is told the batch of the step after it, and
// the steps train on the same batches, in the same order, as without it.
TEST(TrainingLoopTest, NextBatchAnnouncesEachStepsSuccessor) {
  std::vector<int32_t> labels(10);
  for (int i = 0; i < 10; ++i) labels[i] = i;
  auto train = data::InMemoryDataset::Create({1, 2}, std::vector<uint8_t>(20, 1), labels);
  ASSERT_TRUE(train.ok()) << train.status();
  JobSpec job = Job(2);
  job.set_batch_size(3);  // 3 batches an epoch, the 10th example dropped
  job.set_seed(5);
  auto first = [](const data::Batch& b) { return b.labels.data<int32_t>()[0] * 100 + b.labels.data<int32_t>()[1]; };
  std::vector<int> stepped[2], announced;
  for (int look_ahead = 0; look_ahead < 2; ++look_ahead) {
    TrainingLoopHooks hooks;
    hooks.step = [&](const data::Batch& b) -> absl::StatusOr<float> {
      stepped[look_ahead].push_back(first(b));
      return 0.5f;
    };
    if (look_ahead == 1) hooks.next_batch = [&](const data::Batch& b) { announced.push_back(first(b)); };
    auto r = RunTrainingLoop(job, *train, data::InMemoryDataset(), hooks, Clock::now());
    ASSERT_TRUE(r.ok()) << r.status();
  }
  ASSERT_EQ(stepped[0].size(), 6u);
  EXPECT_EQ(stepped[0], stepped[1]);
  // Every step but the last heard of its successor before it ran, across
  // the epoch's end too.
  ASSERT_EQ(announced.size(), 5u);
  for (size_t i = 0; i + 1 < stepped[1].size(); ++i) EXPECT_EQ(announced[i], stepped[1][i + 1]) << i;
}

}  // namespace
}  // namespace weft
