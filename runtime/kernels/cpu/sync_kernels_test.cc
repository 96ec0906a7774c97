// The k-of-N push kernels on one device: a stale step refused and not
// applied, the k-th push applying the mean and advancing the step, parked
// pushes released on that apply or failed by the step's abort, and Adam's
// bias correction counting applies rather than pushes.
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "graph/builder.h"
#include "graph/ops/ops.h"
#include "gtest/gtest.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/kernels/accumulator.h"
#include "runtime/rendezvous.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace {

using testing::FloatTensor;

constexpr absl::Duration kWait = absl::Seconds(30);  // a bound, not a timing

Tensor Step(int64_t s) {
  Tensor t(DType::kInt64, TensorShape({}));
  t.data<int64_t>()[0] = s;
  return t;
}

// One variable "w" of 3 floats with an accumulator of k; pushes feed "grad"
// and "local_step" and fetch (outcome, the accumulator's step).
class SyncKernelsTest : public ::testing::Test {
 protected:
  SyncKernelsTest() : device_("/job:ps/task:0/device:CPU:0", 1), b_(&graph_) {}

  void Build(const std::string& op, int k, const std::vector<std::pair<std::string, AttrValue>>& attrs) {
    k_ = k;
    device_.resources()->SetVariable("w", FloatTensor({3}, {1, 2, 3}));
    Output w = b_.Variable("w", DType::kFloat32, {3}, "zeros");
    std::vector<Output> inputs = {w};
    if (op == "AccumulateApplyMomentum") inputs.push_back(b_.Variable("accum", DType::kFloat32, {3}, "zeros"));
    if (op == "AccumulateApplyAdam") {
      inputs.push_back(b_.Variable("m", DType::kFloat32, {3}, "zeros"));
      inputs.push_back(b_.Variable("v", DType::kFloat32, {3}, "zeros"));
      inputs.push_back(b_.Variable("t", DType::kFloat32, {}, "zeros"));
    }
    inputs.push_back(b_.Placeholder(DType::kFloat32, {3}, "grad"));
    inputs.push_back(b_.Placeholder(DType::kInt64, {}, "local_step"));
    AttrList all = {Attr("accumulator", "w"), Attr("num_required", k)};
    for (const auto& a : attrs) all.push_back(a);
    b_.Op(op, inputs, all, "push");
    b_.Op("AccumulatorStep", {}, {Attr("accumulator", "w"), Attr("num_required", k)}, "step");
    ASSERT_TRUE(b_.status().ok()) << b_.status();
    ExecutorOptions push;
    push.feeds = {"grad", "local_step"};
    push.fetches = {"push:1"};
    auto e = Executor::Create(&graph_, &device_, push);
    ASSERT_TRUE(e.ok()) << e.status();
    push_ = *std::move(e);
    ExecutorOptions read;
    read.fetches = {"step"};
    e = Executor::Create(&graph_, &device_, read);
    ASSERT_TRUE(e.ok()) << e.status();
    read_ = *std::move(e);
  }

  // The push's outcome (-1 refused, 0 applied by another, 1 applied by it).
  absl::StatusOr<int64_t> Push(const std::vector<float>& grad, int64_t local_step, int64_t step_id = 0,
                               Rendezvous* rendezvous = nullptr) {
    std::vector<Tensor> out;
    absl::Status s = push_->Run({FloatTensor({3}, grad), Step(local_step)}, &out, step_id, rendezvous);
    if (!s.ok()) return s;
    return out[0].data<int64_t>()[0];
  }

  int64_t GlobalStep() {
    std::vector<Tensor> out;
    EXPECT_TRUE(read_->Run({}, &out).ok());
    return out.empty() ? -1 : out[0].data<int64_t>()[0];
  }

  std::shared_ptr<Accumulator> Acc() {
    // Created here when the pushing thread has not got there yet.
    auto acc = device_.resources()->LookupOrCreate<Accumulator>(
        "accumulator/w", [this]() -> absl::StatusOr<std::shared_ptr<Accumulator>> {
          return std::make_shared<Accumulator>("w", k_);
        });
    EXPECT_TRUE(acc.ok()) << acc.status();
    return acc.ok() ? *acc : nullptr;
  }

  std::vector<float> Value(const std::string& name) {
    Tensor t = *device_.resources()->LookupVariable(name);
    return std::vector<float>(t.data<float>(), t.data<float>() + t.NumElements());
  }

  int k_ = 1;
  CpuDevice device_;
  Graph graph_;
  GraphBuilder b_;
  std::unique_ptr<Executor> push_;
  std::unique_ptr<Executor> read_;
};

TEST_F(SyncKernelsTest, KthPushAppliesTheMeanAndReleasesTheParkedPush) {
  Build("AccumulateApplyGradientDescent", 2, {Attr("learning_rate", 0.5f)});
  EXPECT_EQ(GlobalStep(), 0);
  absl::StatusOr<int64_t> first;
  std::thread pusher([&] { first = Push({2, 4, 6}, 0); });
  ASSERT_TRUE(Acc()->AwaitParked(1, kWait));
  // Parked: added, but nothing applied yet and the step has not moved.
  EXPECT_EQ(Value("w"), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(GlobalStep(), 0);
  auto second = Push({0, 0, 2}, 0);
  pusher.join();
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*second, 1);
  EXPECT_EQ(*first, 0);
  // w -= 0.5 * mean({2,4,6}, {0,0,2}) = 0.5 * {1,2,4}
  EXPECT_EQ(Value("w"), (std::vector<float>{0.5f, 1, 1}));
  EXPECT_EQ(GlobalStep(), 1);
}

TEST_F(SyncKernelsTest, StaleStepIsRefusedAndNotApplied) {
  Build("AccumulateApplyGradientDescent", 1, {Attr("learning_rate", 1.0f)});
  ASSERT_EQ(Push({1, 1, 1}, 0).value(), 1);
  EXPECT_EQ(Value("w"), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(GlobalStep(), 1);
  // A replica that read step 0 before that apply.
  auto stale = Push({100, 100, 100}, 0);
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_EQ(*stale, -1);
  EXPECT_EQ(Value("w"), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(GlobalStep(), 1);
  EXPECT_EQ(Acc()->refused(), 1);
}

TEST_F(SyncKernelsTest, AbortReleasesAParkedPushWithAnError) {
  Build("AccumulateApplyGradientDescent", 2, {Attr("learning_rate", 1.0f)});
  LocalRendezvous rendezvous;
  absl::StatusOr<int64_t> parked;
  std::thread pusher([&] { parked = Push({5, 5, 5}, 0, /*step_id=*/7, &rendezvous); });
  ASSERT_TRUE(Acc()->AwaitParked(1, kWait));
  rendezvous.StartAbort(absl::AbortedError("step 7 aborted by the master"));
  pusher.join();
  EXPECT_EQ(parked.status().code(), absl::StatusCode::kAborted) << parked.status();
  EXPECT_EQ(Acc()->num_parked(), 0);
  EXPECT_EQ(Value("w"), (std::vector<float>{1, 2, 3}));
  // The aborted gradient was taken back: the next two make the step alone.
  absl::StatusOr<int64_t> again;
  std::thread second([&] { again = Push({1, 1, 1}, 0); });
  ASSERT_TRUE(Acc()->AwaitParked(1, kWait));
  ASSERT_EQ(Push({3, 3, 3}, 0).value(), 1);
  second.join();
  EXPECT_EQ(again.value(), 0);
  EXPECT_EQ(Value("w"), (std::vector<float>{-1, 0, 1}));
}

TEST_F(SyncKernelsTest, APushInAnAbortedStepFailsAtOnce) {
  Build("AccumulateApplyGradientDescent", 2, {Attr("learning_rate", 1.0f)});
  LocalRendezvous rendezvous;
  rendezvous.StartAbort(absl::CancelledError("job cancelled"));
  auto r = Push({5, 5, 5}, 0, 3, &rendezvous);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  EXPECT_EQ(Acc()->num_parked(), 0);
}

TEST_F(SyncKernelsTest, AdamCountsAppliesNotPushes) {
  Build("AccumulateApplyAdam", 2,
        {Attr("learning_rate", 0.1f), Attr("beta1", 0.9f), Attr("beta2", 0.999f), Attr("epsilon", 1e-7f)});
  for (int step = 0; step < 3; ++step) {
    absl::StatusOr<int64_t> first;
    std::thread pusher([&] { first = Push({1, -1, 2}, step); });
    ASSERT_TRUE(Acc()->AwaitParked(1, kWait));
    ASSERT_EQ(Push({3, -1, 0}, step).value(), 1);
    pusher.join();
    ASSERT_EQ(first.value(), 0);
  }
  // Six pushes, three global steps: t = 3, and the updates are Adam's on
  // the means {2, -1, 1} at t = 1, 2, 3.
  EXPECT_EQ(Value("t"), std::vector<float>{3});
  std::vector<float> w = {1, 2, 3}, m(3, 0), v(3, 0);
  const std::vector<float> g = {2, -1, 1};
  for (int t = 1; t <= 3; ++t) {
    const double lr_t = 0.1 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
    for (int i = 0; i < 3; ++i) {
      m[i] = 0.9f * m[i] + 0.1f * g[i];
      v[i] = 0.999f * v[i] + 0.001f * g[i] * g[i];
      w[i] -= static_cast<float>(lr_t) * m[i] / (std::sqrt(v[i]) + 1e-7f);
    }
  }
  const std::vector<float> got = Value("w");
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], w[i], 1e-5) << i;
}

TEST_F(SyncKernelsTest, MomentumAppliesTheMean) {
  Build("AccumulateApplyMomentum", 1, {Attr("learning_rate", 1.0f), Attr("momentum", 0.5f)});
  ASSERT_EQ(Push({1, 1, 1}, 0).value(), 1);
  ASSERT_EQ(Push({1, 1, 1}, 1).value(), 1);
  // accum: 1, then 1.5; w -= 1 then 1.5.
  EXPECT_EQ(Value("w"), (std::vector<float>{-1.5f, -0.5f, 0.5f}));
}

TEST_F(SyncKernelsTest, AGradientOfAStepNeverHandedOutIsAnError) {
  Build("AccumulateApplyGradientDescent", 1, {Attr("learning_rate", 1.0f)});
  auto r = Push({1, 1, 1}, 5);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
}

}  // namespace
}  // namespace weft
