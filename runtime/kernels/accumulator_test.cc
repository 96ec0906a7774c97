// The accumulator's contract: stale gradients refused and never applied, the
// k-th current gradient applies the mean and advances the step, parked
// pushers released on apply, aborted ones with an error and their gradient
// taken back out.
#include "runtime/kernels/accumulator.h"

#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

Tensor Grad(std::vector<float> values) {
  Tensor t(DType::kFloat32, TensorShape({static_cast<int64_t>(values.size())}));
  for (size_t i = 0; i < values.size(); ++i) t.data<float>()[i] = values[i];
  return t;
}

// Records each apply's mean.
struct Applies {
  std::vector<std::vector<float>> means;
  Accumulator::ApplyFn Fn() {
    return [this](const Tensor& mean) {
      means.emplace_back(mean.data<float>(), mean.data<float>() + mean.NumElements());
      return absl::OkStatus();
    };
  }
};

// Records how a parked push was released.
struct Released {
  int calls = 0;
  absl::Status status;
  Accumulator::Waiter Fn() {
    return [this](const absl::Status& s) {
      ++calls;
      status = s;
    };
  }
};

TEST(AccumulatorTest, KthPushAppliesTheMeanAndAdvancesTheStep) {
  Accumulator acc("w", 2);
  Applies applies;
  Released first;
  auto r = acc.Push(0, Grad({1, 2}), applies.Fn(), first.Fn());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outcome, Accumulator::Outcome::kParked);
  EXPECT_EQ(acc.num_parked(), 1);
  EXPECT_TRUE(applies.means.empty());
  EXPECT_EQ(first.calls, 0);

  r = acc.Push(0, Grad({3, 6}), applies.Fn(), nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outcome, Accumulator::Outcome::kApplied);
  ASSERT_EQ(applies.means.size(), 1u);
  EXPECT_EQ(applies.means[0], (std::vector<float>{2, 4}));
  EXPECT_EQ(acc.step(), 1);
  // The parked pusher is released with OK once its step is applied.
  EXPECT_EQ(first.calls, 1);
  EXPECT_TRUE(first.status.ok()) << first.status;
  EXPECT_EQ(acc.num_parked(), 0);

  // The sum starts over: step 1's mean holds only step 1's gradients.
  Released third;
  ASSERT_EQ(acc.Push(1, Grad({10, 10}), applies.Fn(), third.Fn())->outcome, Accumulator::Outcome::kParked);
  ASSERT_EQ(acc.Push(1, Grad({0, 20}), applies.Fn(), nullptr)->outcome, Accumulator::Outcome::kApplied);
  ASSERT_EQ(applies.means.size(), 2u);
  EXPECT_EQ(applies.means[1], (std::vector<float>{5, 15}));
  EXPECT_EQ(acc.step(), 2);
  EXPECT_EQ(third.calls, 1);
}

TEST(AccumulatorTest, StaleGradientIsRefusedCountedAndNeverApplied) {
  Accumulator acc("w", 1);
  Applies applies;
  ASSERT_EQ(acc.Push(0, Grad({1}), applies.Fn(), nullptr)->outcome, Accumulator::Outcome::kApplied);
  ASSERT_EQ(acc.step(), 1);
  // A replica that read step 0 before that apply pushes late.
  Released stale;
  auto r = acc.Push(0, Grad({100}), applies.Fn(), stale.Fn());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outcome, Accumulator::Outcome::kRefused);
  EXPECT_EQ(acc.refused(), 1);
  EXPECT_EQ(acc.step(), 1);
  EXPECT_EQ(applies.means.size(), 1u);
  EXPECT_EQ(stale.calls, 0);  // not parked either
  // The next current gradient's mean does not contain the refused one.
  ASSERT_EQ(acc.Push(1, Grad({3}), applies.Fn(), nullptr)->outcome, Accumulator::Outcome::kApplied);
  ASSERT_EQ(applies.means.size(), 2u);
  EXPECT_EQ(applies.means[1], std::vector<float>{3});
}

TEST(AccumulatorTest, AGradientOfAFutureStepIsAnError) {
  Accumulator acc("w", 2);
  Applies applies;
  auto r = acc.Push(3, Grad({1}), applies.Fn(), nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("'w'"), std::string::npos) << r.status();
}

TEST(AccumulatorTest, AbortReleasesAParkedPushWithAnErrorAndTakesItsGradientBack) {
  Accumulator acc("w", 2);
  Applies applies;
  Released aborted, kept;
  auto r = acc.Push(0, Grad({100}), applies.Fn(), aborted.Fn());
  ASSERT_EQ(r->outcome, Accumulator::Outcome::kParked);
  ASSERT_EQ(acc.Push(0, Grad({0}), applies.Fn(), kept.Fn()).value().outcome, Accumulator::Outcome::kApplied);
  // That was the 2nd: the first pusher is released; abort of a released waiter is a no-op.
  acc.Abort(r->waiter_id, absl::AbortedError("late"));
  EXPECT_EQ(aborted.calls, 1);
  EXPECT_TRUE(aborted.status.ok());

  Released parked;
  r = acc.Push(1, Grad({100}), applies.Fn(), parked.Fn());
  ASSERT_EQ(r->outcome, Accumulator::Outcome::kParked);
  acc.Abort(r->waiter_id, absl::AbortedError("step 7 aborted"));
  EXPECT_EQ(parked.calls, 1);
  EXPECT_EQ(parked.status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(acc.num_parked(), 0);
  EXPECT_EQ(acc.step(), 1);
  // The aborted gradient no longer counts: two more pushes make the step.
  Released again;
  ASSERT_EQ(acc.Push(1, Grad({2}), applies.Fn(), again.Fn())->outcome, Accumulator::Outcome::kParked);
  ASSERT_EQ(acc.Push(1, Grad({4}), applies.Fn(), nullptr)->outcome, Accumulator::Outcome::kApplied);
  ASSERT_EQ(applies.means.size(), 2u);
  EXPECT_EQ(applies.means[1], std::vector<float>{3});
}

TEST(AccumulatorTest, DestructionReleasesParkedPushesWithCancelled) {
  Released parked;
  {
    Accumulator acc("w", 3);
    Applies applies;
    ASSERT_EQ(acc.Push(0, Grad({1}), applies.Fn(), parked.Fn())->outcome, Accumulator::Outcome::kParked);
    EXPECT_TRUE(acc.AwaitParked(1, absl::ZeroDuration()));
    EXPECT_FALSE(acc.AwaitParked(2, absl::ZeroDuration()));
  }
  EXPECT_EQ(parked.calls, 1);
  EXPECT_EQ(parked.status.code(), absl::StatusCode::kCancelled);
}

TEST(AccumulatorTest, AFailedApplyFailsEveryPusherAndKeepsTheStep) {
  Accumulator acc("w", 2);
  Released parked;
  auto fail = [](const Tensor&) { return absl::InvalidArgumentError("bad var"); };
  ASSERT_EQ(acc.Push(0, Grad({1}), fail, parked.Fn())->outcome, Accumulator::Outcome::kParked);
  auto r = acc.Push(0, Grad({1}), fail, nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parked.calls, 1);
  EXPECT_EQ(parked.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(acc.step(), 0);
}

TEST(AccumulatorTest, GradientsOfAnotherShapeAreInvalidArgument) {
  // Declared before the accumulator, whose destructor releases the parked
  // push into it.
  Released parked;
  Applies applies;
  Accumulator acc("w", 3);
  ASSERT_EQ(acc.Push(0, Grad({1, 2}), applies.Fn(), parked.Fn())->outcome, Accumulator::Outcome::kParked);
  EXPECT_EQ(acc.Push(0, Grad({1}), applies.Fn(), nullptr).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weft
