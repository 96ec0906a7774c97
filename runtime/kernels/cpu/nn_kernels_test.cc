// Activation, softmax, loss and dropout kernels against scalar references.
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
using testing::IntTensor;
using testing::MaxAbsDiff;
using testing::RandomTensor;

std::vector<Tensor> RunStep(const Graph& g, const std::vector<std::pair<std::string, Tensor>>& feeds,
                        const std::vector<Output>& outs, int64_t step_id = 0) {
  CpuDevice device("/device:CPU:0", 1);
  ExecutorOptions opts;
  std::vector<Tensor> values;
  for (const auto& [name, t] : feeds) {
    opts.feeds.push_back(name);
    values.push_back(t);
  }
  for (const Output& o : outs) opts.fetches.push_back(o.name());
  auto exec = Executor::Create(&g, &device, opts);
  EXPECT_TRUE(exec.ok()) << exec.status();
  std::vector<Tensor> result;
  if (!exec.ok()) return result;
  absl::Status s = (*exec)->Run(values, &result, step_id);
  EXPECT_TRUE(s.ok()) << s;
  return result;
}

template <typename F>
Tensor Map(const Tensor& x, F f) {
  Tensor y(DType::kFloat32, x.shape());
  for (int64_t i = 0; i < x.NumElements(); ++i) y.data<float>()[i] = f(x.data<float>()[i]);
  return y;
}

template <typename F>
Tensor Map2(const Tensor& a, const Tensor& b, F f) {
  Tensor y(DType::kFloat32, a.shape());
  for (int64_t i = 0; i < a.NumElements(); ++i) y.data<float>()[i] = f(a.data<float>()[i], b.data<float>()[i]);
  return y;
}

TEST(ActivationKernelTest, ForwardAndGradientsMatchScalarFormulas) {
  // Includes large magnitudes, where tanh and the logistic saturate.
  Tensor x = RandomTensor({5, 37}, 1, -12.0f, 12.0f);
  Tensor gr = RandomTensor({5, 37}, 2);
  Graph g;
  GraphBuilder b(&g);
  Output xo = b.Placeholder(DType::kFloat32, {-1, 37}, "x");
  Output go = b.Placeholder(DType::kFloat32, {-1, 37}, "g");
  Output relu = ops::Relu(&b, xo), sig = ops::Sigmoid(&b, xo), tanh = ops::Tanh(&b, xo);
  Output relu_g = ops::ReluGrad(&b, go, xo), sig_g = ops::SigmoidGrad(&b, xo, go), tanh_g = ops::TanhGrad(&b, xo, go);
  ASSERT_TRUE(b.status().ok()) << b.status();
  auto r = RunStep(g, {{"x", x}, {"g", gr}}, {relu, sig, tanh, relu_g, sig_g, tanh_g});
  ASSERT_EQ(r.size(), 6u);
  EXPECT_EQ(MaxAbsDiff(r[0], Map(x, [](float v) { return v > 0 ? v : 0.0f; })), 0);
  EXPECT_LT(MaxAbsDiff(r[1], Map(x, [](float v) { return 1.0f / (1.0f + std::exp(-v)); })), 1e-6);
  EXPECT_LT(MaxAbsDiff(r[2], Map(x, [](float v) { return std::tanh(v); })), 1e-6);
  EXPECT_EQ(MaxAbsDiff(r[3], Map2(gr, x, [](float g, float v) { return v > 0 ? g : 0.0f; })), 0);
  // The *Grad ops take y; here x is fed as y to test the formula alone.
  EXPECT_LT(MaxAbsDiff(r[4], Map2(x, gr, [](float y, float g) { return g * y * (1 - y); })), 1e-4);
  EXPECT_LT(MaxAbsDiff(r[5], Map2(x, gr, [](float y, float g) { return g * (1 - y * y); })), 1e-4);
}

TEST(SoftmaxKernelTest, StableForLargeLogitsAndGradientMatches) {
  Tensor x = FloatTensor({2, 3}, {1000.0f, 1001.0f, 1002.0f, -5.0f, 0.0f, 5.0f});
  Tensor gr = FloatTensor({2, 3}, {0.3f, -0.2f, 0.5f, 1.0f, 2.0f, -1.0f});
  Graph g;
  GraphBuilder b(&g);
  Output xo = b.Placeholder(DType::kFloat32, {-1, 3}, "x");
  Output y = ops::Softmax(&b, xo);
  Output dy = ops::SoftmaxGrad(&b, y, b.Placeholder(DType::kFloat32, {-1, 3}, "g"));
  auto r = RunStep(g, {{"x", x}, {"g", gr}}, {y, dy});
  ASSERT_EQ(r.size(), 2u);
  Tensor want(DType::kFloat32, {2, 3}), want_grad(DType::kFloat32, {2, 3});
  for (int i = 0; i < 2; ++i) {
    double m = -INFINITY, s = 0, dot = 0;
    for (int j = 0; j < 3; ++j) m = std::max<double>(m, x.data<float>()[i * 3 + j]);
    for (int j = 0; j < 3; ++j) s += std::exp(x.data<float>()[i * 3 + j] - m);
    for (int j = 0; j < 3; ++j) want.data<float>()[i * 3 + j] = std::exp(x.data<float>()[i * 3 + j] - m) / s;
    for (int j = 0; j < 3; ++j) dot += want.data<float>()[i * 3 + j] * gr.data<float>()[i * 3 + j];
    for (int j = 0; j < 3; ++j) {
      want_grad.data<float>()[i * 3 + j] = want.data<float>()[i * 3 + j] * (gr.data<float>()[i * 3 + j] - dot);
    }
  }
  EXPECT_LT(MaxAbsDiff(r[0], want), 1e-6);
  EXPECT_LT(MaxAbsDiff(r[1], want_grad), 1e-6);
}

TEST(SparseXentKernelTest, LossAndBackpropMatchReference) {
  const int n = 6, c = 5;
  Tensor logits = RandomTensor({n, c}, 3, -4.0f, 4.0f);
  logits.data<float>()[0] = 500.0f;  // stability
  Tensor labels = IntTensor({n}, {0, 4, 2, 1, 3, 0});
  Graph g;
  GraphBuilder b(&g);
  auto xent = ops::SparseSoftmaxCrossEntropyWithLogits(&b, b.Placeholder(DType::kFloat32, {-1, c}, "logits"),
                                                       b.Placeholder(DType::kInt32, {-1}, "labels"));
  ASSERT_TRUE(b.status().ok()) << b.status();
  EXPECT_EQ(xent.loss.shape(), (TensorShape{-1}));
  EXPECT_EQ(xent.backprop.shape(), (TensorShape{-1, c}));
  auto r = RunStep(g, {{"logits", logits}, {"labels", labels}}, {xent.loss, xent.backprop});
  ASSERT_EQ(r.size(), 2u);
  Tensor want_loss(DType::kFloat32, {n}), want_bp(DType::kFloat32, {n, c});
  for (int i = 0; i < n; ++i) {
    const float* z = logits.data<float>() + i * c;
    double m = -INFINITY, s = 0;
    for (int j = 0; j < c; ++j) m = std::max<double>(m, z[j]);
    for (int j = 0; j < c; ++j) s += std::exp(z[j] - m);
    const int label = labels.data<int32_t>()[i];
    want_loss.data<float>()[i] = static_cast<float>(std::log(s) + m - z[label]);
    for (int j = 0; j < c; ++j) {
      want_bp.data<float>()[i * c + j] = static_cast<float>(std::exp(z[j] - m) / s - (j == label ? 1 : 0));
    }
  }
  EXPECT_LT(MaxAbsDiff(r[0], want_loss), 1e-5);
  EXPECT_LT(MaxAbsDiff(r[1], want_bp), 1e-6);
}

TEST(SparseXentKernelTest, OutOfRangeLabelNamesValueAndRow) {
  Graph g;
  GraphBuilder b(&g);
  auto xent = ops::SparseSoftmaxCrossEntropyWithLogits(&b, b.Placeholder(DType::kFloat32, {-1, 10}, "logits"),
                                                       b.Placeholder(DType::kInt32, {-1}, "labels"), "xent");
  CpuDevice device("/device:CPU:0", 1);
  for (int bad : {10, -1}) {
    auto r = RunGraphOnce(g, &device, {{"logits", RandomTensor({3, 10}, 1)}, {"labels", IntTensor({3}, {0, 2, bad})}},
                          {xent.loss.name()});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("xent"), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find("label " + std::to_string(bad) + " in row 2"), std::string::npos)
        << r.status();
    EXPECT_NE(r.status().message().find("[0, 10)"), std::string::npos) << r.status();
  }
}

TEST(DropoutKernelTest, MaskIsScaledReproducibleAndVariesByStep) {
  const float rate = 0.3f;
  const int64_t n = 20000;
  Graph g;
  GraphBuilder b(&g);
  auto d = ops::Dropout(&b, b.Placeholder(DType::kFloat32, {-1}, "x"), rate, 42);
  ASSERT_TRUE(b.status().ok()) << b.status();
  Tensor x = RandomTensor({n}, 9);
  auto step0 = RunStep(g, {{"x", x}}, {d.y, d.mask}, 0);
  auto again = RunStep(g, {{"x", x}}, {d.y, d.mask}, 0);
  auto step1 = RunStep(g, {{"x", x}}, {d.y, d.mask}, 1);
  ASSERT_EQ(step0.size(), 2u);
  ASSERT_EQ(step1.size(), 2u);
  ASSERT_EQ(again.size(), 2u);
  const float scale = 1.0f / (1.0f - rate);
  int64_t dropped = 0, differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float m = step0[1].data<float>()[i];
    ASSERT_TRUE(m == 0.0f || m == scale) << m;
    dropped += m == 0.0f;
    EXPECT_EQ(step0[0].data<float>()[i], x.data<float>()[i] * m);
    differ += m != step1[1].data<float>()[i];
  }
  EXPECT_EQ(MaxAbsDiff(step0[1], again[1]), 0);
  // Binomial(20000, 0.3): sd ~ 65.
  EXPECT_NEAR(static_cast<double>(dropped), rate * n, 400);
  // Independent masks disagree with probability 2 * 0.3 * 0.7 = 0.42.
  EXPECT_NEAR(static_cast<double>(differ), 0.42 * n, 500);
}

TEST(DropoutKernelTest, ZeroRateKeepsEverything) {
  Graph g;
  GraphBuilder b(&g);
  auto d = ops::Dropout(&b, b.Placeholder(DType::kFloat32, {-1}, "x"), 0.0f);
  Tensor x = RandomTensor({1001}, 9);
  auto r = RunStep(g, {{"x", x}}, {d.y});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(MaxAbsDiff(r[0], x), 0);
}

}  // namespace
}  // namespace weft
