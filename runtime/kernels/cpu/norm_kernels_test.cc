// BatchNorm (training and inference), ApplyMovingAverage and GlobalAvgPool
// against references computed here in double, and their refusals of bad
// input. (Their gradients: gradient_check_test.)
#include <algorithm>
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

// Synchronised batch norm on one replica is batch norm: its sums give the
// statistics BatchNorm takes in two passes, and its gradient, the direct
// part plus the part through the sums, is BatchNormGrad's.
TEST(SyncBatchNormKernelTest, FromItsOwnSumsIsBatchNormForwardAndBackward) {
  const int64_t c = 4;
  Tensor x = RandomTensor({3, 2, 5, c}, 7, -2.0f, 2.0f);
  for (int64_t i = 0; i < x.NumElements(); ++i) x.data<float>()[i] += 0.5f * (i % c);  // a mean per channel
  Tensor gamma = RandomTensor({c}, 8, 0.5f, 2.0f), beta = RandomTensor({c}, 9), dy = RandomTensor(x.shape(), 10);
  Graph g;
  GraphBuilder b(&g);
  Output xo = b.Placeholder(DType::kFloat32, {-1, 2, 5, c}, "x");
  Output dyo = b.Placeholder(DType::kFloat32, {-1, 2, 5, c}, "dy");
  Output ga = b.Const(gamma, "gamma"), be = b.Const(beta, "beta");
  const AttrList eps = {Attr("epsilon", 1e-3f)};
  Node* bn = b.AddNode("BatchNorm", {xo, ga, be}, eps, "bn");
  Node* sums = b.AddNode("BatchNormSums", {xo}, {}, "sums");
  Node* fs = b.AddNode("BatchNormFromSums", {xo, ga, be, Output(sums, 0), Output(sums, 1), Output(sums, 2)}, eps,
                       "fs");
  b.AddNode("BatchNormGrad", {dyo, xo, ga, Output(bn, 1), Output(bn, 3)}, {}, "bn_grad");
  Node* fg = b.AddNode("BatchNormFromSumsGrad", {dyo, xo, ga, Output(fs, 1), Output(fs, 3), Output(sums, 2)}, {},
                       "fs_grad");
  Node* sg = b.AddNode("BatchNormSumsGrad", {xo, Output(fg, 3), Output(fg, 4)}, {}, "sums_grad");
  b.Op("Add", {Output(fg, 0), Output(sg, 0)}, {}, "dx");
  ASSERT_TRUE(b.status().ok()) << b.status();
  std::vector<Tensor> out;
  ASSERT_TRUE(RunGraph(g, {{"x", x}, {"dy", dy}},
                       {"bn:0", "bn:1", "bn:2", "bn:3", "fs:0", "fs:1", "fs:2", "fs:3", "sums:2", "bn_grad:0",
                        "bn_grad:1", "bn_grad:2", "dx", "fs_grad:1", "fs_grad:2", "fs_grad:0"},
                       &out)
                  .ok());
  EXPECT_EQ(out[8].data<float>()[0], 3 * 2 * 5);  // the count
  for (int k = 0; k < 4; ++k) EXPECT_LE(testing::MaxAbsDiff(out[4 + k], out[k]), 2e-5) << "output " << k;
  EXPECT_LE(testing::MaxAbsDiff(out[12], out[9]), 2e-5) << "dx";
  EXPECT_LE(testing::MaxAbsDiff(out[13], out[10]), 2e-5) << "dgamma";
  EXPECT_LE(testing::MaxAbsDiff(out[14], out[11]), 2e-5) << "dbeta";
  // The direct part alone is not the whole gradient.
  EXPECT_GT(testing::MaxAbsDiff(out[12], out[15]), 1e-3);
}

// Sums of two halves add up to the whole's, which is what lets replicas
// meet in an all-reduce; a count below one is refused by name.
TEST(SyncBatchNormKernelTest, SumsAddAcrossHalvesAndNoRowsIsRefused) {
  Tensor x = RandomTensor({6, 3}, 11);
  Graph g;
  GraphBuilder b(&g);
  Output xo = b.Placeholder(DType::kFloat32, {-1, 3}, "x");
  b.AddNode("BatchNormSums", {xo}, {}, "sums");
  ASSERT_TRUE(b.status().ok()) << b.status();
  std::vector<Tensor> whole, top, bottom;
  ASSERT_TRUE(RunGraph(g, {{"x", x}}, {"sums:0", "sums:1", "sums:2"}, &whole).ok());
  Tensor t(DType::kFloat32, {2, 3}), u(DType::kFloat32, {4, 3});
  std::copy(x.data<float>(), x.data<float>() + 6, t.data<float>());
  std::copy(x.data<float>() + 6, x.data<float>() + 18, u.data<float>());
  ASSERT_TRUE(RunGraph(g, {{"x", t}}, {"sums:0", "sums:1", "sums:2"}, &top).ok());
  ASSERT_TRUE(RunGraph(g, {{"x", u}}, {"sums:0", "sums:1", "sums:2"}, &bottom).ok());
  for (int k = 0; k < 3; ++k) {
    for (int64_t i = 0; i < whole[k].NumElements(); ++i) {
      EXPECT_NEAR(top[k].data<float>()[i] + bottom[k].data<float>()[i], whole[k].data<float>()[i], 1e-5) << k;
    }
  }
  double sq = 0;
  for (int64_t r = 0; r < 6; ++r) sq += std::pow(x.data<float>()[r * 3 + 1], 2);
  EXPECT_NEAR(whole[1].data<float>()[1], sq, 1e-5);

  Graph g2;
  GraphBuilder b2(&g2);
  Output x2 = b2.Placeholder(DType::kFloat32, {-1, 3}, "x");
  Output n = b2.Placeholder(DType::kFloat32, {}, "n");
  Output v = b2.Const(RandomTensor({3}, 12));
  b2.AddNode("BatchNormFromSums", {x2, v, v, v, v, n}, {}, "fs");
  ASSERT_TRUE(b2.status().ok()) << b2.status();
  absl::Status none = RunGraph(g2, {{"x", x}, {"n", Tensor::Scalar<float>(0.0f)}}, {"fs:0"}, &whole);
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument) << none;
  EXPECT_TRUE(testing::StatusHas(none, "count 0")) << none;
  // Shapes known when the graph is built: the node is refused by name.
  b2.AddNode("BatchNormFromSums", {x2, v, v, v, b2.Const(RandomTensor({4}, 13)), n}, {}, "bad_fs");
  EXPECT_TRUE(testing::StatusHas(b2.status(), "bad_fs")) << b2.status();
  EXPECT_TRUE(testing::StatusHas(b2.status(), "sum_squares")) << b2.status();
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
