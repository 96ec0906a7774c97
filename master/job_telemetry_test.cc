#include "master/job_telemetry.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace weft {
namespace master {
namespace {

TrainProgress At(int64_t step, double loss, double accuracy = -1) {
  TrainProgress p;
  p.step = step;
  p.loss = loss;
  p.test_accuracy = accuracy;
  p.samples_per_second = 100;
  return p;
}

TEST(JobTelemetry, StepsLossAndStepTimeReachTheRegistry) {
  metrics::Registry r;
  JobTelemetry t(&r);
  t.OnProgress("job-1", At(1, 2.0));
  t.OnProgress("job-1", At(2, 1.5));
  t.OnProgress("job-1", At(5, 1.0));  // a call of three steps
  const std::string text = r.Render();
  // The first report is the baseline; 4 steps were timed after it, and
  // the counter holds every step the job reported.
  EXPECT_TRUE(absl::StrContains(text, "weft_steps_total{job=\"job-1\"} 5\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "weft_step_duration_seconds_count{job=\"job-1\"} 4\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "weft_loss{job=\"job-1\"} 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "weft_samples_per_second{job=\"job-1\"} 100\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "weft_test_accuracy{job=\"job-1\"} -1\n")) << text;
}

TEST(JobTelemetry, EvaluationJoinsItsStepsPoint) {
  metrics::Registry r;
  JobTelemetry t(&r);
  t.OnProgress("j", At(10, 0.5));
  t.OnProgress("j", At(10, 0.5, 0.875));
  std::vector<HistoryPoint> h = t.History("j");
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].step, 10);
  EXPECT_DOUBLE_EQ(h[0].accuracy, 0.875);
  EXPECT_TRUE(absl::StrContains(r.Render(), "weft_test_accuracy{job=\"j\"} 0.875\n"));
  EXPECT_TRUE(t.History("other").empty());
}

TEST(JobTelemetry, HistoryIsBoundedAndSpansTheWholeJob) {
  metrics::Registry r;
  JobTelemetry t(&r);
  const int64_t steps = 10 * JobTelemetry::kMaxHistory + 7;
  for (int64_t s = 1; s <= steps; ++s) t.OnProgress("long", At(s, 1.0 / s));
  std::vector<HistoryPoint> h = t.History("long");
  ASSERT_LE(h.size(), JobTelemetry::kMaxHistory);
  ASSERT_GE(h.size(), JobTelemetry::kMaxHistory / 4);
  EXPECT_EQ(h.front().step, 1);
  EXPECT_GT(h.back().step, steps - steps / 8) << "the curve reaches the job's end";
  for (size_t i = 1; i < h.size(); ++i) ASSERT_LT(h[i - 1].step, h[i].step);
}

TEST(JobTelemetry, RepeatedAccuracyIsOneEvaluation) {
  metrics::Registry r;
  JobTelemetry t(&r);
  // The loop repeats the last evaluation's accuracy on every later step.
  t.OnProgress("j", At(4, 1.0));
  t.OnProgress("j", At(8, 0.9, 0.5));
  for (int64_t s = 12; s <= 40; s += 4) t.OnProgress("j", At(s, 0.8, 0.5));
  t.OnProgress("j", At(44, 0.7, 0.625));
  int evaluations = 0;
  std::vector<HistoryPoint> h = t.History("j");
  for (const HistoryPoint& p : h) evaluations += p.accuracy >= 0;
  EXPECT_EQ(evaluations, 2);
  EXPECT_EQ(h.size(), 11u) << "steps arriving 4 at a time each make a point";
}

TEST(JobTelemetry, LongJobsKeepAnEvenCurveAndEveryEvaluation) {
  metrics::Registry r;
  JobTelemetry t(&r);
  for (int64_t s = 4; s <= 40000; s += 4) t.OnProgress("j", At(s, 1.0, s % 4000 == 0 ? s / 40000.0 : -1));
  std::vector<HistoryPoint> h = t.History("j");
  int evaluations = 0;
  for (const HistoryPoint& p : h) evaluations += p.accuracy >= 0;
  EXPECT_EQ(evaluations, 10);
  // The points spread over the whole job: no quarter of it is empty.
  int quarters[4] = {0, 0, 0, 0};
  for (const HistoryPoint& p : h) ++quarters[std::min<int64_t>(3, (p.step - 1) / 10000)];
  for (int q = 0; q < 4; ++q) EXPECT_GT(quarters[q], static_cast<int>(h.size()) / 8) << q;
}

TEST(JobTelemetry, RecoveriesCountEachRestartOnce) {
  metrics::Registry r;
  JobTelemetry t(&r);
  JobStatus s;
  s.set_job_id("j");
  s.set_test_accuracy(-1);
  s.set_restarts(1);
  t.OnStatus(s);
  t.OnStatus(s);  // published again: not a new recovery
  s.set_restarts(3);
  t.OnStatus(s);
  EXPECT_TRUE(absl::StrContains(r.Render(), "weft_recoveries_total{job=\"j\"} 3\n")) << r.Render();
}

TEST(JobTelemetry, AnElasticJobsMembershipChangesAreCountedOnceAndItsWorkersShown) {
  metrics::Registry r;
  JobTelemetry t(&r);
  JobStatus s;
  s.set_job_id("e");
  s.add_workers("/job:worker/task:0");
  s.add_workers("/job:worker/task:1");
  s.add_workers("/job:worker/task:2");
  t.OnStatus(s);
  EXPECT_TRUE(absl::StrContains(r.Render(), "weft_job_workers{job=\"e\"} 3\n")) << r.Render();
  s.mutable_workers()->RemoveLast();
  s.add_membership_change()->set_workers(2);
  t.OnStatus(s);
  t.OnStatus(s);  // published again: not a new change
  EXPECT_TRUE(absl::StrContains(r.Render(), "weft_membership_changes_total{job=\"e\"} 1\n")) << r.Render();
  EXPECT_TRUE(absl::StrContains(r.Render(), "weft_job_workers{job=\"e\"} 2\n")) << r.Render();
}

}  // namespace
}  // namespace master
}  // namespace weft
