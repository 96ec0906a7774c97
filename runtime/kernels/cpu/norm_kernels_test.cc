// BatchNorm (training and inference), ApplyMovingAverage and GlobalAvgPool
// against references computed here in double, and their refusals of bad
// input. (Their gradients: gradient_check_test.)
#include <cmath>
#include <vector>

#include "graph/builder.h"
#include "gtest/gtest.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace {

using testing::FloatTensor;
using testing::RandomTensor;
using testing::RunGraph;

// Per-channel mean and biased variance of x viewed as rows of c channels.
void Moments(const Tensor& x, int64_t c, std::vector<double>* mean, std::vector<double>* var) {
  const int64_t rows = x.NumElements() / c;
  mean->assign(c, 0.0);
  var->assign(c, 0.0);
  const float* p = x.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < c; ++j) (*mean)[j] += p[r * c + j];
  }
  for (double& m : *mean) m /= rows;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < c; ++j) (*var)[j] += std::pow(p[r * c + j] - (*mean)[j], 2);
  }
  for (double& v : *var) v /= rows;
}

TEST(BatchNormKernelTest, TrainingNormalisesEachChannelOverTheBatch) {
  // An offset and scale per channel that float sums of x^2 would lose.
  const int64_t c = 5;
  Tensor x = RandomTensor({4, 3, 3, c}, 1, -2.0f, 2.0f);
  for (int64_t i = 0; i < x.NumElements(); ++i) x.data<float>()[i] = 1000.0f + 3.0f * (i % c) * x.data<float>()[i];
  Tensor gamma = RandomTensor({c}, 2, 0.5f, 2.0f), beta = RandomTensor({c}, 3);
  Graph g;
  GraphBuilder b(&g);
  Output xo = b.Placeholder(DType::kFloat32, {-1, 3, 3, c}, "x");
  Node* bn = b.AddNode("BatchNorm", {xo, b.Const(gamma, "gamma"), b.Const(beta, "beta")},
                       {Attr("epsilon", 1e-3f)}, "bn");
  ASSERT_TRUE(b.status().ok()) << b.status();
  std::vector<Tensor> out;
  ASSERT_TRUE(RunGraph(g, {{"x", x}}, {"bn:0", "bn:1", "bn:2", "bn:3"}, &out).ok());
  (void)bn;
  std::vector<double> mean, var;
  Moments(x, c, &mean, &var);
  const int64_t rows = x.NumElements() / c;
  for (int64_t j = 0; j < c; ++j) {
    EXPECT_NEAR(out[1].data<float>()[j], mean[j], 1e-4 * std::abs(mean[j])) << j;
    EXPECT_NEAR(out[2].data<float>()[j], var[j] * rows / (rows - 1), 1e-4 * var[j] + 1e-6) << j;
    EXPECT_NEAR(out[3].data<float>()[j], 1.0 / std::sqrt(var[j] + 1e-3), 1e-3 / std::sqrt(var[j] + 1e-3)) << j;
  }
  for (int64_t i = 0; i < x.NumElements(); ++i) {
    const int64_t j = i % c;
    const double want =
        (x.data<float>()[i] - mean[j]) / std::sqrt(var[j] + 1e-3) * gamma.data<float>()[j] + beta.data<float>()[j];
    ASSERT_NEAR(out[0].data<float>()[i], want, 2e-3) << i;
  }
}

TEST(BatchNormKernelTest, InferenceUsesTheGivenStatistics) {
  Tensor x = RandomTensor({7, 3}, 1);
  Tensor gamma = FloatTensor({3}, {1.0f, 2.0f, -1.0f}), beta = FloatTensor({3}, {0.0f, 0.5f, 1.0f});
  Tensor mean = FloatTensor({3}, {0.1f, -0.2f, 0.3f}), var = FloatTensor({3}, {1.0f, 4.0f, 0.25f});
  Graph g;
  GraphBuilder b(&g);
  Output xo = b.Placeholder(DType::kFloat32, {-1, 3}, "x");
  b.Op("BatchNormInference", {xo, b.Const(gamma), b.Const(beta), b.Const(mean), b.Const(var)},
       {Attr("epsilon", 0.01f)}, "y");
  ASSERT_TRUE(b.status().ok()) << b.status();
  std::vector<Tensor> out;
  ASSERT_TRUE(RunGraph(g, {{"x", x}}, {"y"}, &out).ok());
  for (int64_t i = 0; i < x.NumElements(); ++i) {
    const int64_t j = i % 3;
    const double want = (x.data<float>()[i] - mean.data<float>()[j]) / std::sqrt(var.data<float>()[j] + 0.01) *
                            gamma.data<float>()[j] +
                        beta.data<float>()[j];
    EXPECT_NEAR(out[0].data<float>()[i], want, 1e-5) << i;
  }
}

TEST(BatchNormKernelTest, RefusesWhatHasNoStatisticsOrMismatches) {
  Graph g;
  GraphBuilder b(&g);
  Output xo = b.Placeholder(DType::kFloat32, {-1, 3}, "x");
  Output gamma = b.Placeholder(DType::kFloat32, {-1}, "gamma");
  b.Op("BatchNorm", {xo, gamma, gamma}, {}, "bn");
  ASSERT_TRUE(b.status().ok()) << b.status();
  std::vector<Tensor> out;
  absl::Status empty = RunGraph(g, {{"x", Tensor(DType::kFloat32, {0, 3})}, {"gamma", RandomTensor({3}, 1)}}, {"bn:0"},
                           &out);
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument) << empty;
  EXPECT_NE(empty.message().find("no rows"), std::string::npos) << empty;
  absl::Status wrong = RunGraph(g, {{"x", RandomTensor({2, 3}, 1)}, {"gamma", RandomTensor({4}, 2)}}, {"bn:0"}, &out);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument) << wrong;
  EXPECT_NE(wrong.message().find("gamma"), std::string::npos) << wrong;

  // Known at graph-build time: the node is refused by name.
  Graph g2;
  GraphBuilder b2(&g2);
  Output x2 = b2.Placeholder(DType::kFloat32, {-1, 3}, "x");
  b2.Op("BatchNorm", {x2, b2.Const(RandomTensor({4}, 1)), b2.Const(RandomTensor({3}, 2))}, {}, "bad_bn");
  EXPECT_FALSE(b2.status().ok());
  EXPECT_NE(b2.status().message().find("bad_bn"), std::string::npos) << b2.status();
  EXPECT_NE(b2.status().message().find("gamma"), std::string::npos) << b2.status();
  Graph g3;
  GraphBuilder b3(&g3);
  Output x3 = b3.Placeholder(DType::kFloat32, {-1, 3}, "x");
  Output v = b3.Const(RandomTensor({3}, 1));
  b3.Op("BatchNorm", {x3, v, v}, {Attr("epsilon", -1.0f)}, "neg_eps");
  EXPECT_NE(b3.status().message().find("epsilon"), std::string::npos) << b3.status();
}

TEST(MovingAverageKernelTest, BlendsTheValueIntoTheVariable) {
  Graph g;
  GraphBuilder b(&g);
  Output var = b.Variable("moving", DType::kFloat32, {3}, "ones");
  Output value = b.Placeholder(DType::kFloat32, {3}, "value");
  b.Op("ApplyMovingAverage", {var, value}, {Attr("momentum", 0.9f)}, "update");
  ASSERT_TRUE(b.status().ok()) << b.status();
  CpuDevice device("/device:CPU:0", 1);
  device.resources()->SetVariable("moving", FloatTensor({3}, {1.0f, 1.0f, 1.0f}));
  ExecutorOptions opts;
  opts.feeds = {"value"};
  opts.fetches = {"update"};
  auto exec = Executor::Create(&g, &device, opts);
  ASSERT_TRUE(exec.ok()) << exec.status();
  std::vector<Tensor> out;
  Tensor v = FloatTensor({3}, {11.0f, 1.0f, -9.0f});
  ASSERT_TRUE((*exec)->Run({v}, &out, 2).ok());
  ASSERT_TRUE((*exec)->Run({v}, &out, 3).ok());
  // 1 -> 0.9 + 0.1 v -> 0.9 (0.9 + 0.1 v) + 0.1 v = 0.81 + 0.19 v.
  const float want[3] = {0.81f + 0.19f * 11.0f, 1.0f, 0.81f - 0.19f * 9.0f};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(out[0].data<float>()[i], want[i], 1e-5) << i;

  Graph bad;
  GraphBuilder bb(&bad);
  Output bv = bb.Variable("m", DType::kFloat32, {3}, "ones");
  bb.Op("ApplyMovingAverage", {bv, bb.Const(RandomTensor({3}, 1))}, {Attr("momentum", 1.0f)}, "no_decay");
  EXPECT_NE(bb.status().message().find("momentum"), std::string::npos) << bb.status();
}

TEST(GlobalAvgPoolKernelTest, AveragesEveryPositionPerChannel) {
  Tensor x = RandomTensor({2, 3, 4, 5}, 1);
  Graph g;
  GraphBuilder b(&g);
  Output xo = b.Placeholder(DType::kFloat32, {-1, 3, 4, 5}, "x");
  Output gr = b.Placeholder(DType::kFloat32, {-1, 5}, "g");
  Output pooled = b.Op("GlobalAvgPool", {xo}, {}, "pooled");
  b.Op("GlobalAvgPoolGrad", {xo, gr}, {}, "dx");
  ASSERT_TRUE(b.status().ok()) << b.status();
  EXPECT_EQ(pooled.shape(), (TensorShape{-1, 5}));
  Tensor grad = RandomTensor({2, 5}, 2);
  std::vector<Tensor> out;
  ASSERT_TRUE(RunGraph(g, {{"x", x}, {"g", grad}}, {"pooled", "dx"}, &out).ok());
  for (int n = 0; n < 2; ++n) {
    for (int c = 0; c < 5; ++c) {
      double sum = 0;
      for (int p = 0; p < 12; ++p) sum += x.data<float>()[(n * 12 + p) * 5 + c];
      EXPECT_NEAR(out[0].data<float>()[n * 5 + c], sum / 12, 1e-5);
      for (int p = 0; p < 12; ++p) {
        EXPECT_FLOAT_EQ(out[1].data<float>()[(n * 12 + p) * 5 + c], grad.data<float>()[n * 5 + c] / 12.0f);
      }
    }
  }
  Graph g2;
  GraphBuilder b2(&g2);
  b2.Op("GlobalAvgPool", {b2.Placeholder(DType::kFloat32, {-1, 5}, "flat")}, {}, "flat_pool");
  EXPECT_NE(b2.status().message().find("NHWC"), std::string::npos) << b2.status();
}

}  // namespace
}  // namespace weft
