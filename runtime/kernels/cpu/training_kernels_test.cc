// Optimizer kernels over several steps against hand-written update rules.
#include <cmath>

#include "graph/builder.h"
#include "graph/ops/ops.h"
#include "gtest/gtest.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace {

using testing::FloatTensor;
using testing::RandomTensor;

constexpr int kSteps = 4;
const TensorShape kShape{2, 3};

// Builds variables named `vars` (shape kShape, except "t": a scalar), sets
// their values, and runs `update` kSteps times feeding grads[step] to "grad".
class OptimizerTest : public ::testing::Test {
 protected:
  OptimizerTest() : device_("/device:CPU:0", 1), b_(&graph_) {}

  Output Var(const std::string& name, const Tensor& value) {
    device_.resources()->SetVariable(name, value.DeepCopy());
    return b_.Variable(name, DType::kFloat32, value.shape(), "zeros");
  }

  // Runs the update once per gradient; returns the fetched (forwarded) var of the last step.
  Tensor RunSteps(const Output& update, const std::vector<Tensor>& grads) {
    EXPECT_TRUE(b_.status().ok()) << b_.status();
    ExecutorOptions opts;
    opts.feeds = {"grad"};
    opts.fetches = {update.name()};
    auto exec = Executor::Create(&graph_, &device_, opts);
    EXPECT_TRUE(exec.ok()) << exec.status();
    std::vector<Tensor> out;
    for (size_t s = 0; s < grads.size(); ++s) {
      absl::Status st = (*exec)->Run({grads[s]}, &out, static_cast<int64_t>(s));
      EXPECT_TRUE(st.ok()) << st;
    }
    return out.empty() ? Tensor() : out[0];
  }

  Tensor Value(const std::string& name) { return *device_.resources()->LookupVariable(name); }

  static std::vector<Tensor> Grads() {
    std::vector<Tensor> g;
    for (int s = 0; s < kSteps; ++s) g.push_back(RandomTensor(kShape, 100 + s));
    return g;
  }

  CpuDevice device_;
  Graph graph_;
  GraphBuilder b_;
};

TEST_F(OptimizerTest, GradientDescent) {
  Tensor w0 = RandomTensor(kShape, 1);
  Output w = Var("w", w0);
  Output update = ops::ApplyGradientDescent(&b_, w, b_.Placeholder(DType::kFloat32, kShape, "grad"), 0.1f);
  const auto grads = Grads();
  Tensor fetched = RunSteps(update, grads);
  std::vector<float> want(w0.flat<float>().begin(), w0.flat<float>().end());
  for (const Tensor& g : grads)
    for (int i = 0; i < 6; ++i) want[i] -= 0.1f * g.data<float>()[i];
  Tensor got = Value("w");
  EXPECT_TRUE(fetched.SharesBufferWith(got));
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(got.data<float>()[i], want[i], 1e-6) << i;
}

class MomentumTest : public OptimizerTest, public ::testing::WithParamInterface<bool> {};

TEST_P(MomentumTest, MatchesTensorFlowSemantics) {
  const bool nesterov = GetParam();
  const float lr = 0.05f, mu = 0.9f;
  Tensor w0 = RandomTensor(kShape, 2), a0 = RandomTensor(kShape, 3);
  Output update = ops::ApplyMomentum(&b_, Var("w", w0), Var("accum", a0),
                                     b_.Placeholder(DType::kFloat32, kShape, "grad"), lr, mu, nesterov);
  const auto grads = Grads();
  RunSteps(update, grads);
  std::vector<double> w(w0.flat<float>().begin(), w0.flat<float>().end());
  std::vector<double> a(a0.flat<float>().begin(), a0.flat<float>().end());
  for (const Tensor& gt : grads) {
    for (int i = 0; i < 6; ++i) {
      const double g = gt.data<float>()[i];
      a[i] = a[i] * mu + g;
      w[i] -= nesterov ? lr * (g + mu * a[i]) : lr * a[i];
    }
  }
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(Value("w").data<float>()[i], w[i], 1e-5) << i;
    EXPECT_NEAR(Value("accum").data<float>()[i], a[i], 1e-5) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Nesterov, MomentumTest, ::testing::Bool());

TEST_F(OptimizerTest, AdamWithBiasCorrection) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-7;
  Tensor w0 = RandomTensor(kShape, 4);
  Tensor zeros = FloatTensor(kShape, {0, 0, 0, 0, 0, 0});
  Output update = ops::ApplyAdam(&b_, Var("w", w0), Var("m", zeros), Var("v", zeros), Var("t", FloatTensor({}, {0})),
                                 b_.Placeholder(DType::kFloat32, kShape, "grad"), lr, b1, b2, eps);
  const auto grads = Grads();
  RunSteps(update, grads);
  std::vector<double> w(w0.flat<float>().begin(), w0.flat<float>().end()), m(6, 0), v(6, 0);
  int t = 0;
  for (const Tensor& gt : grads) {
    ++t;
    const double lr_t = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (int i = 0; i < 6; ++i) {
      const double g = gt.data<float>()[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      w[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
    }
  }
  EXPECT_EQ(Value("t").data<float>()[0], static_cast<float>(kSteps));
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(Value("w").data<float>()[i], w[i], 1e-5) << i;
    EXPECT_NEAR(Value("m").data<float>()[i], m[i], 1e-6) << i;
    EXPECT_NEAR(Value("v").data<float>()[i], v[i], 1e-6) << i;
  }
  // The first Adam step moves every weight by about lr (|m / sqrt(v)| = 1).
  EXPECT_GT(std::abs(w[0] - w0.data<float>()[0]), 0.5 * lr);
}

TEST_F(OptimizerTest, GradientShapeMismatchIsRejectedWhenBuilding) {
  Output w = Var("w", RandomTensor(kShape, 1));
  Output update = ops::ApplyGradientDescent(&b_, w, b_.Placeholder(DType::kFloat32, {3, 2}, "grad"), 0.1f, "sgd");
  EXPECT_FALSE(update.valid());
  EXPECT_NE(b_.status().message().find("sgd"), std::string::npos) << b_.status();
  EXPECT_NE(b_.status().message().find("grad [3,2] must have var's shape [2,3]"), std::string::npos) << b_.status();
}

}  // namespace
}  // namespace weft
