// Learning-rate schedules, weight decay and gradient clipping in the
// optimizer kernels, over several steps against rules written out here.
#include <cmath>
#include <string>
#include <vector>

#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/ops/lr_schedule.h"
#include "gtest/gtest.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace {

using testing::FloatTensor;
using testing::RandomTensor;

constexpr double kPi = 3.14159265358979323846;
const TensorShape kShape{2, 3};

// The rate of update t of a 2-step warm-up to `lr` followed by a 3-step
// cosine decay to alpha lr, written out step by step.
double WarmCosine(double lr, double alpha, int t) {
  if (t <= 2) return lr * t / 2.0;
  const double s = std::min(t - 3, 3);
  return lr * (alpha + (1 - alpha) * 0.5 * (1 + std::cos(kPi * s / 3.0)));
}

TEST(LrScheduleTest, WarmUpThenCosineReachesAlphaAndStays) {
  LrSchedule s;
  s.learning_rate = 0.4f;
  s.warmup_steps = 2;
  s.decay = LrSchedule::kCosine;
  s.decay_steps = 3;
  s.alpha = 0.25f;
  EXPECT_NEAR(s.At(1), 0.2, 1e-7);
  EXPECT_NEAR(s.At(2), 0.4, 1e-7);
  EXPECT_NEAR(s.At(3), 0.4, 1e-7);  // the first decay step has the full rate
  EXPECT_NEAR(s.At(6), 0.1, 1e-7);  // alpha lr after decay_steps
  EXPECT_NEAR(s.At(60), 0.1, 1e-7);
  for (int t = 1; t <= 8; ++t) EXPECT_NEAR(s.At(t), WarmCosine(0.4, 0.25, t), 1e-7) << t;
  EXPECT_TRUE(s.varies());
  EXPECT_FALSE(LrSchedule{}.varies());
}

TEST(LrScheduleTest, StepDecayMultipliesEachInterval) {
  LrSchedule s;
  s.learning_rate = 1.0f;
  s.decay = LrSchedule::kStep;
  s.decay_steps = 2;
  s.factor = 0.5f;
  const double want[] = {1, 1, 0.5, 0.5, 0.25};
  for (int t = 1; t <= 5; ++t) EXPECT_NEAR(s.At(t), want[t - 1], 1e-7) << t;
}

class ScheduledUpdateTest : public ::testing::Test {
 protected:
  ScheduledUpdateTest() : device_("/device:CPU:0", 1), b_(&graph_) {}

  Output Var(const std::string& name, const Tensor& value) {
    device_.resources()->SetVariable(name, value.DeepCopy());
    return b_.Variable(name, DType::kFloat32, value.shape(), "zeros");
  }
  Output Grad() { return b_.Placeholder(DType::kFloat32, kShape, "grad"); }
  Output Count() { return Var("t", FloatTensor({}, {0})); }

  // Runs the fetches once per gradient.
  void RunSteps(const std::vector<std::string>& fetches, const std::vector<Tensor>& grads,
                std::vector<Tensor>* out = nullptr) {
    ASSERT_TRUE(b_.status().ok()) << b_.status();
    ExecutorOptions opts;
    opts.feeds = {"grad"};
    opts.fetches = fetches;
    auto exec = Executor::Create(&graph_, &device_, opts);
    ASSERT_TRUE(exec.ok()) << exec.status();
    std::vector<Tensor> fetched;
    for (size_t s = 0; s < grads.size(); ++s) {
      absl::Status st = (*exec)->Run({grads[s]}, &fetched, static_cast<int64_t>(s));
      ASSERT_TRUE(st.ok()) << st;
    }
    if (out != nullptr) *out = fetched;
  }

  float At(const std::string& var, int i) { return (*device_.resources()->LookupVariable(var)).data<float>()[i]; }

  static std::vector<Tensor> Grads(int steps) {
    std::vector<Tensor> g;
    for (int s = 0; s < steps; ++s) g.push_back(RandomTensor(kShape, 200 + s));
    return g;
  }

  static AttrList WarmCosineAttrs(float lr, float alpha) {
    return {Attr("learning_rate", lr), Attr("warmup_steps", int64_t{2}), Attr("decay", "cosine"),
            Attr("decay_steps", int64_t{3}), Attr("decay_alpha", alpha)};
  }

  CpuDevice device_;
  Graph graph_;
  GraphBuilder b_;
};

TEST_F(ScheduledUpdateTest, GradientDescentFollowsTheScheduleAndCountsItsUpdates) {
  Tensor w0 = RandomTensor(kShape, 1);
  Output update = b_.Op("ApplyGradientDescent", {Var("w", w0), Count(), Grad()}, WarmCosineAttrs(0.1f, 0.1f));
  const auto grads = Grads(7);
  RunSteps({update.name()}, grads);
  std::vector<double> w(w0.flat<float>().begin(), w0.flat<float>().end());
  for (int t = 1; t <= 7; ++t) {
    for (int i = 0; i < 6; ++i) w[i] -= WarmCosine(0.1, 0.1, t) * grads[t - 1].data<float>()[i];
  }
  EXPECT_EQ(At("t", 0), 7.0f);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(At("w", i), w[i], 1e-6) << i;
}

TEST_F(ScheduledUpdateTest, MomentumWeightDecayIsAddedToTheGradient) {
  const double lr = 0.05, mu = 0.9, wd = 0.1;
  Tensor w0 = RandomTensor(kShape, 2), a0 = RandomTensor(kShape, 3);
  AttrList attrs = {Attr("learning_rate", static_cast<float>(lr)), Attr("momentum", static_cast<float>(mu)),
                    Attr("weight_decay", static_cast<float>(wd)), Attr("decay", "step"),
                    Attr("decay_steps", int64_t{2}), Attr("decay_factor", 0.5f)};
  Output update = b_.Op("ApplyMomentum", {Var("w", w0), Var("accum", a0), Count(), Grad()}, attrs);
  const auto grads = Grads(5);
  RunSteps({update.name()}, grads);
  std::vector<double> w(w0.flat<float>().begin(), w0.flat<float>().end());
  std::vector<double> a(a0.flat<float>().begin(), a0.flat<float>().end());
  for (int t = 1; t <= 5; ++t) {
    const double rate = lr * std::pow(0.5, (t - 1) / 2);
    for (int i = 0; i < 6; ++i) {
      const double g = grads[t - 1].data<float>()[i] + wd * w[i];
      a[i] = a[i] * mu + g;
      w[i] -= rate * a[i];
    }
  }
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(At("w", i), w[i], 1e-5) << i;
    EXPECT_NEAR(At("accum", i), a[i], 1e-5) << i;
  }
}

TEST_F(ScheduledUpdateTest, AdamWDecaysTheWeightApartFromTheGradient) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-7, wd = 0.5;
  Tensor w0 = RandomTensor(kShape, 4);
  Tensor zeros = FloatTensor(kShape, {0, 0, 0, 0, 0, 0});
  AttrList attrs = WarmCosineAttrs(static_cast<float>(lr), 0.0f);
  for (auto a : {Attr("beta1", 0.9f), Attr("beta2", 0.999f), Attr("epsilon", 1e-7f), Attr("weight_decay", 0.5f)}) {
    attrs.push_back(a);
  }
  Output update = b_.Op("ApplyAdam", {Var("w", w0), Var("m", zeros), Var("v", zeros), Count(), Grad()}, attrs);
  const auto grads = Grads(6);
  RunSteps({update.name()}, grads);
  std::vector<double> w(w0.flat<float>().begin(), w0.flat<float>().end()), m(6, 0), v(6, 0);
  for (int t = 1; t <= 6; ++t) {
    const double rate = WarmCosine(lr, 0.0, t);
    const double lr_t = rate * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (int i = 0; i < 6; ++i) {
      const double g = grads[t - 1].data<float>()[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      w[i] = w[i] * (1 - rate * wd) - lr_t * m[i] / (std::sqrt(v[i]) + eps);
    }
  }
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(At("w", i), w[i], 1e-5) << i;
}

TEST_F(ScheduledUpdateTest, GlobalNormScaleBoundsTheNormOfAllGradients) {
  Output g = Grad();
  Output other = b_.Const(FloatTensor({2}, {3, -4}), "other");
  Node* clip = b_.AddNode("GlobalNormScale", {g, other}, {Attr("clip_norm", 2.0f)}, "clip");
  Output scaled = b_.Op("Mul", {g, Output(clip, 0)}, {}, "scaled");
  std::vector<Tensor> grads = {FloatTensor(kShape, {0, 0, 0, 0, 0, 0}), FloatTensor(kShape, {1, 0, 0, 0, 0, 0})};
  std::vector<Tensor> out;
  RunSteps({Output(clip, 0).name(), Output(clip, 1).name(), scaled.name()}, {grads[1]}, &out);
  ASSERT_EQ(out.size(), 3u);
  const double norm = std::sqrt(1.0 + 9.0 + 16.0);
  EXPECT_NEAR(out[1].data<float>()[0], norm, 1e-6);
  EXPECT_NEAR(out[0].data<float>()[0], 2.0 / norm, 1e-7);
  EXPECT_NEAR(out[2].data<float>()[0], 2.0 / norm, 1e-7);
}

TEST_F(ScheduledUpdateTest, GlobalNormScaleLeavesSmallGradientsAndPoisonsNonFiniteOnes) {
  Output g = Grad();
  Node* clip = b_.AddNode("GlobalNormScale", {g}, {Attr("clip_norm", 10.0f)}, "clip");
  std::vector<Tensor> out;
  RunSteps({Output(clip, 0).name()}, {FloatTensor(kShape, {1, 2, 2, 0, 0, 0})}, &out);
  EXPECT_EQ(out[0].data<float>()[0], 1.0f);
  RunSteps({Output(clip, 0).name()}, {FloatTensor(kShape, {INFINITY, 0, 0, 0, 0, 0})}, &out);
  EXPECT_TRUE(std::isnan(out[0].data<float>()[0]));
}

// Each bad node is refused when it is built, by its name and what is wrong.
TEST_F(ScheduledUpdateTest, BadSchedulesAndClipsAreRefusedWhenBuilding) {
  struct Case {
    std::string op;
    AttrList attrs;
    bool with_t;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"ApplyGradientDescent", WarmCosineAttrs(0.1f, 0), false, "needs the update count t"},
      {"ApplyGradientDescent", {Attr("learning_rate", 0.1f), Attr("decay", "linear")}, true, "attr decay must be"},
      {"ApplyGradientDescent",
       {Attr("learning_rate", 0.1f), Attr("decay", "cosine"), Attr("decay_steps", int64_t{0})},
       true,
       "decay_steps must be positive"},
      {"ApplyGradientDescent", {Attr("learning_rate", 0.1f), Attr("warmup_steps", int64_t{-1})}, true,
       "warmup_steps must not be negative"},
      {"ApplyGradientDescent", {Attr("learning_rate", 0.1f), Attr("weight_decay", -1.0f)}, false,
       "weight_decay must be a non-negative number"},
      {"ApplyGradientDescent",
       {Attr("learning_rate", 0.1f), Attr("decay", "step"), Attr("decay_steps", int64_t{2}),
        Attr("decay_factor", 1.5f)},
       true,
       "decay_factor must be in (0, 1]"},
      {"GlobalNormScale", {Attr("clip_norm", 0.0f)}, false, "clip_norm must be a positive number"},
  };
  int n = 0;
  for (const Case& c : cases) {
    Graph graph;
    GraphBuilder b(&graph);
    std::vector<Output> in = {b.Variable("w", DType::kFloat32, kShape, "zeros")};
    if (c.with_t) in.push_back(b.Variable("t", DType::kFloat32, {}, "zeros"));
    in.push_back(b.Placeholder(DType::kFloat32, kShape, "grad"));
    if (c.op == "GlobalNormScale") in = {in.back()};
    const std::string name = "bad" + std::to_string(n++);
    b.Op(c.op, in, c.attrs, name);
    EXPECT_NE(b.status().message().find(name), std::string::npos) << b.status();
    EXPECT_NE(b.status().message().find(c.want), std::string::npos) << c.want << ": " << b.status();
  }
  // t must be a float32 scalar.
  b_.Op("ApplyGradientDescent", {Var("w", RandomTensor(kShape, 1)), Var("t2", RandomTensor({2}, 1)), Grad()},
        {Attr("learning_rate", 0.1f)}, "wide_t");
  EXPECT_NE(b_.status().message().find("t (the update count) must have rank 0"), std::string::npos) << b_.status();
}

}  // namespace
}  // namespace weft
