#include "common/metrics.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace weft {
namespace metrics {
namespace {

TEST(Metrics, CounterRendersWithHelpTypeAndEscapedLabels) {
  Registry r;
  auto* f = r.AddCounter("weft_test_requests_total", "Requests.\nSecond line \\", {"method", "code"});
  f->With({"Worker/RunGraph", "OK"})->Increment();
  f->With({"Worker/RunGraph", "OK"})->Increment(2);
  f->With({"a\"b\\c\nd", "X"})->Increment(0.5);
  const std::string text = r.Render();
  EXPECT_TRUE(absl::StrContains(text, "# HELP weft_test_requests_total Requests.\\nSecond line \\\\\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "# TYPE weft_test_requests_total counter\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "weft_test_requests_total{method=\"Worker/RunGraph\",code=\"OK\"} 3\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "weft_test_requests_total{method=\"a\\\"b\\\\c\\nd\",code=\"X\"} 0.5\n"))
      << text;
}

TEST(Metrics, SameNameGivesSameFamily) {
  Registry r;
  auto* a = r.AddGauge("weft_test_up", "Up.", {"task"});
  auto* b = r.AddGauge("weft_test_up", "Up.", {"task"});
  EXPECT_EQ(a, b);
  EXPECT_EQ(a->With({"worker:0"}), b->With({"worker:0"}));
  a->With({"worker:0"})->Set(1);
  a->With({"worker:0"})->Add(-0.25);
  EXPECT_DOUBLE_EQ(b->With({"worker:0"})->value(), 0.75);
}

TEST(Metrics, HistogramBucketsAreCumulativeWithSumAndCount) {
  Registry r;
  auto* h = r.AddHistogram("weft_test_seconds", "Durations.", {"job"}, {0.1, 1, 10})->With({"j"});
  for (double v : {0.05, 0.1, 0.5, 5.0, 50.0}) h->Observe(v);
  EXPECT_EQ(h->CumulativeCounts(), (std::vector<uint64_t>{2, 3, 4, 5}));
  const std::string text = r.Render();
  EXPECT_TRUE(absl::StrContains(text, "weft_test_seconds_bucket{job=\"j\",le=\"0.1\"} 2\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "weft_test_seconds_bucket{job=\"j\",le=\"1\"} 3\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "weft_test_seconds_bucket{job=\"j\",le=\"+Inf\"} 5\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "weft_test_seconds_count{job=\"j\"} 5\n")) << text;
  EXPECT_NEAR(h->sum(), 55.65, 1e-9);
}

TEST(Metrics, UnlabelledHistogramHasOnlyLe) {
  Registry r;
  r.AddHistogram("weft_test_plain_seconds", "D.", {}, {1})->With({})->Observe(2);
  const std::string text = r.Render();
  EXPECT_TRUE(absl::StrContains(text, "weft_test_plain_seconds_bucket{le=\"1\"} 0\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "weft_test_plain_seconds_count 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "weft_test_plain_seconds_sum 2\n")) << text;
}

TEST(Metrics, RemoveDropsTheSeries) {
  Registry r;
  auto* f = r.AddGauge("weft_test_loss", "Loss.", {"job"});
  f->With({"job-1"})->Set(2);
  f->With({"job-2"})->Set(3);
  f->Remove({"job-1"});
  const std::string text = r.Render();
  EXPECT_FALSE(absl::StrContains(text, "job-1")) << text;
  EXPECT_TRUE(absl::StrContains(text, "weft_test_loss{job=\"job-2\"} 3\n")) << text;
}

TEST(Metrics, CallbackGaugeIsReadAtRender) {
  Registry r;
  double bytes = 10;
  r.AddGaugeCallback("weft_test_bytes", "B.", {"device"}, [&] {
    return std::vector<std::pair<Labels, double>>{{{"cpu"}, bytes}, {{"too", "many"}, 1}};
  });
  EXPECT_TRUE(absl::StrContains(r.Render(), "weft_test_bytes{device=\"cpu\"} 10\n"));
  bytes = 12;
  const std::string text = r.Render();
  EXPECT_TRUE(absl::StrContains(text, "weft_test_bytes{device=\"cpu\"} 12\n")) << text;
  EXPECT_FALSE(absl::StrContains(text, "many")) << text;
  r.RemoveGaugeCallback("weft_test_bytes");
  EXPECT_FALSE(absl::StrContains(r.Render(), "weft_test_bytes"));
}

TEST(Metrics, FamiliesRenderSortedByName) {
  Registry r;
  r.AddCounter("weft_b_total", "B.")->With({})->Increment();
  r.AddCounter("weft_a_total", "A.")->With({})->Increment();
  const std::string text = r.Render();
  EXPECT_LT(text.find("weft_a_total"), text.find("weft_b_total"));
}

TEST(Metrics, FormatValue) {
  EXPECT_EQ(FormatValue(3), "3");
  EXPECT_EQ(FormatValue(-2), "-2");
  EXPECT_EQ(FormatValue(1e18), "1e+18");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(std::strtod(FormatValue(1.0 / 3).c_str(), nullptr), 1.0 / 3);
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(Metrics, ConcurrentIncrementsAreNotLost) {
  Registry r;
  Counter* c = r.AddCounter("weft_test_concurrent_total", "C.")->With({});
  Histogram* h = r.AddHistogram("weft_test_concurrent_seconds", "H.", {}, {1})->With({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c->Increment();
        h->Observe(0.5);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->value(), 40000);
  EXPECT_EQ(h->count(), 40000u);
  EXPECT_EQ(h->sum(), 20000);
}

TEST(MetricsDeathTest, MismatchedLabelsAreAProgrammerError) {
  Registry r;
  auto* f = r.AddCounter("weft_test_labels_total", "L.", {"a"});
  EXPECT_DEATH(f->With({"x", "y"}), "has 1 labels, given 2");
  EXPECT_DEATH(r.AddGauge("weft_test_labels_total", "L.", {"a"}), "another type");
  EXPECT_DEATH(r.AddCounter("9bad", "L."), "invalid metric name");
}

}  // namespace
}  // namespace metrics
}  // namespace weft
