#include "client/progress.h"

#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(ProgressTest, BarShowsStepsEpochLossRateAndEta) {
  TrainProgress p;
  p.step = 50;
  p.total_steps = 100;
  p.epoch = 2;
  p.epochs = 4;
  p.loss = 0.31234;
  p.samples_per_second = 68200;
  p.elapsed_seconds = 10;
  const std::string line = ProgressDisplay::BarLine(p, 20);
  EXPECT_TRUE(absl::StartsWith(line, "[==========>         ]")) << line;
  EXPECT_TRUE(absl::StrContains(line, "50/100 epoch 2/4")) << line;
  EXPECT_TRUE(absl::StrContains(line, "loss 0.3123")) << line;
  EXPECT_TRUE(absl::StrContains(line, "68.2k samples/s")) << line;
  EXPECT_TRUE(absl::StrContains(line, "ETA 0:10")) << line;  // 50 steps left at 5 steps/s
}

TEST(ProgressTest, PlainModePrintsATenthOfTheRunAndEpochEnds) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* out = open_memstream(&buf, &len);
  ASSERT_NE(out, nullptr);
  {
    ProgressDisplay d(out, /*terminal=*/false);
    TrainProgress p;
    p.total_steps = 1000;
    p.epochs = 2;
    for (int s = 1; s <= 1000; ++s) {
      p.step = s;
      p.epoch = s <= 500 ? 1 : 2;
      d.Update(p);
      if (s % 500 == 0) {
        p.epoch_end = true;
        p.test_accuracy = 0.5;
        d.Update(p);
        p.epoch_end = false;
      }
    }
    d.Finish();
  }
  std::fclose(out);
  const std::string text(buf, len);
  std::free(buf);
  int lines = 0;
  for (char c : text) lines += c == '\n';
  EXPECT_EQ(lines, 10 + 2) << text;  // one line per tenth, plus two epoch ends
  EXPECT_TRUE(absl::StrContains(text, "epoch 2 done: step 1000/1000")) << text;
  EXPECT_TRUE(absl::StrContains(text, "test accuracy 0.5000")) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos);  // no bar redraws in a log
}

}  // namespace
}  // namespace weft
