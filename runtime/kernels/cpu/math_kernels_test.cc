// Math kernels against naive references, run through the executor.
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

// Feeds "x0", "x1", ... with `inputs` and fetches `out`.
Tensor RunOp(const Graph& g, const std::vector<Tensor>& inputs, const Output& out, int intra_op_threads = 1) {
  CpuDevice device("/device:CPU:0", intra_op_threads);
  std::vector<std::pair<std::string, Tensor>> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) feeds.emplace_back("x" + std::to_string(i), inputs[i]);
  auto r = RunGraphOnce(g, &device, feeds, {out.name()});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? (*r)[0] : Tensor();
}

Tensor NaiveMatMul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const int64_t m = ta ? a.shape().dim(1) : a.shape().dim(0);
  const int64_t k = ta ? a.shape().dim(0) : a.shape().dim(1);
  const int64_t n = tb ? b.shape().dim(0) : b.shape().dim(1);
  Tensor c(DType::kFloat32, {m, n});
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) {
        const float av = ta ? a.data<float>()[l * m + i] : a.data<float>()[i * k + l];
        const float bv = tb ? b.data<float>()[j * k + l] : b.data<float>()[l * n + j];
        s += double{av} * bv;
      }
      c.data<float>()[i * n + j] = static_cast<float>(s);
    }
  }
  return c;
}

class MatMulTest : public ::testing::TestWithParam<std::tuple<bool, bool, int>> {};

TEST_P(MatMulTest, MatchesNaive) {
  const auto [ta, tb, threads] = GetParam();
  const int64_t m = 37, k = 53, n = 29;
  Tensor a = RandomTensor(ta ? TensorShape{k, m} : TensorShape{m, k}, 1);
  Tensor b = RandomTensor(tb ? TensorShape{n, k} : TensorShape{k, n}, 2);
  Graph g;
  GraphBuilder bld(&g);
  Output y = ops::MatMul(&bld, bld.Placeholder(DType::kFloat32, {-1, -1}, "x0"),
                         bld.Placeholder(DType::kFloat32, {-1, -1}, "x1"), ta, tb);
  ASSERT_TRUE(bld.status().ok()) << bld.status();
  Tensor out = RunOp(g, {a, b}, y, threads);
  EXPECT_LT(MaxAbsDiff(out, NaiveMatMul(a, b, ta, tb)), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Transposes, MatMulTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Values(1, 3)));

TEST(MatMulKernelTest, LargeProductSplitAcrossThreads) {
  Tensor a = RandomTensor({300, 200}, 3), b = RandomTensor({200, 150}, 4);
  Graph g;
  GraphBuilder bld(&g);
  Output y = ops::MatMul(&bld, bld.Placeholder(DType::kFloat32, {300, 200}, "x0"),
                         bld.Placeholder(DType::kFloat32, {200, 150}, "x1"));
  EXPECT_LT(MaxAbsDiff(RunOp(g, {a, b}, y, 4), NaiveMatMul(a, b, false, false)), 1e-4);
}

TEST(MatMulKernelTest, InnerDimensionMismatchAtRunTime) {
  Graph g;
  GraphBuilder bld(&g);
  Output y = ops::MatMul(&bld, bld.Placeholder(DType::kFloat32, {-1, -1}, "x0"),
                         bld.Placeholder(DType::kFloat32, {-1, 10}, "x1"), false, false, "mm");
  CpuDevice device("/device:CPU:0", 1);
  auto r = RunGraphOnce(g, &device, {{"x0", RandomTensor({64, 784}, 1)}, {"x1", RandomTensor({100, 10}, 2)}},
                        {y.name()});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("mm"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("[64,784] x [100,10]"), std::string::npos) << r.status();
}

TEST(MatMulKernelTest, EmptyInnerDimensionGivesZeros) {
  Graph g;
  GraphBuilder bld(&g);
  Output y = ops::MatMul(&bld, bld.Placeholder(DType::kFloat32, {2, 0}, "x0"),
                         bld.Placeholder(DType::kFloat32, {0, 3}, "x1"));
  Tensor out = RunOp(g, {Tensor(DType::kFloat32, {2, 0}), Tensor(DType::kFloat32, {0, 3})}, y);
  EXPECT_EQ(MaxAbsDiff(out, FloatTensor({2, 3}, {0, 0, 0, 0, 0, 0})), 0);
}

TEST(BiasAddKernelTest, AddsAlongTheLastAxisAndSumsBack) {
  Tensor x = RandomTensor({2, 3, 4}, 5), bias = RandomTensor({4}, 6);
  Graph g;
  GraphBuilder b(&g);
  Output xo = b.Placeholder(DType::kFloat32, {-1, 3, 4}, "x0");
  Output y = ops::BiasAdd(&b, xo, b.Placeholder(DType::kFloat32, {4}, "x1"));
  Output gb = ops::BiasAddGrad(&b, xo);
  Tensor want(DType::kFloat32, x.shape());
  Tensor want_sum = FloatTensor({4}, {0, 0, 0, 0});
  for (int i = 0; i < 24; ++i) {
    want.data<float>()[i] = x.data<float>()[i] + bias.data<float>()[i % 4];
    want_sum.data<float>()[i % 4] += x.data<float>()[i];
  }
  EXPECT_LT(MaxAbsDiff(RunOp(g, {x, bias}, y), want), 1e-6);
  EXPECT_LT(MaxAbsDiff(RunOp(g, {x, bias}, gb), want_sum), 1e-5);
}

TEST(ElementwiseKernelTest, SameShapeAndScalarOperands) {
  Tensor x = RandomTensor({3, 5}, 7), y = RandomTensor({3, 5}, 8), s = FloatTensor({}, {2.5f});
  Graph g;
  GraphBuilder b(&g);
  Output xo = b.Placeholder(DType::kFloat32, {-1, 5}, "x0");
  Output yo = b.Placeholder(DType::kFloat32, {-1, 5}, "x1");
  Output so = b.Placeholder(DType::kFloat32, {}, "x2");
  Output add = ops::Add(&b, xo, yo), sub = ops::Sub(&b, xo, yo), mul = ops::Mul(&b, xo, yo);
  Output adds = ops::Add(&b, xo, so), subs = ops::Sub(&b, xo, so), muls = ops::Mul(&b, xo, so);
  Output neg = ops::Neg(&b, xo);
  ASSERT_TRUE(b.status().ok()) << b.status();
  Tensor w_add(DType::kFloat32, x.shape()), w_sub = w_add.DeepCopy(), w_mul = w_add.DeepCopy(),
      w_adds = w_add.DeepCopy(), w_subs = w_add.DeepCopy(), w_muls = w_add.DeepCopy(), w_neg = w_add.DeepCopy();
  for (int i = 0; i < 15; ++i) {
    const float a = x.data<float>()[i], c = y.data<float>()[i];
    w_add.data<float>()[i] = a + c;
    w_sub.data<float>()[i] = a - c;
    w_mul.data<float>()[i] = a * c;
    w_adds.data<float>()[i] = a + 2.5f;
    w_subs.data<float>()[i] = a - 2.5f;
    w_muls.data<float>()[i] = a * 2.5f;
    w_neg.data<float>()[i] = -a;
  }
  const std::vector<Tensor> in = {x, y, s};
  EXPECT_EQ(MaxAbsDiff(RunOp(g, in, add), w_add), 0);
  EXPECT_EQ(MaxAbsDiff(RunOp(g, in, sub), w_sub), 0);
  EXPECT_EQ(MaxAbsDiff(RunOp(g, in, mul), w_mul), 0);
  EXPECT_EQ(MaxAbsDiff(RunOp(g, in, adds), w_adds), 0);
  EXPECT_EQ(MaxAbsDiff(RunOp(g, in, subs), w_subs), 0);
  EXPECT_EQ(MaxAbsDiff(RunOp(g, in, muls), w_muls), 0);
  EXPECT_EQ(MaxAbsDiff(RunOp(g, in, neg), w_neg), 0);
}

TEST(ElementwiseKernelTest, RunTimeShapeMismatchIsAnError) {
  Graph g;
  GraphBuilder b(&g);
  Output y = ops::Add(&b, b.Placeholder(DType::kFloat32, {-1, 5}, "x0"), b.Placeholder(DType::kFloat32, {-1, 5}, "x1"),
                      "sum_node");
  CpuDevice device("/device:CPU:0", 1);
  auto r = RunGraphOnce(g, &device, {{"x0", RandomTensor({3, 5}, 1)}, {"x1", RandomTensor({4, 5}, 2)}}, {y.name()});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("sum_node"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("[3,5] and [4,5]"), std::string::npos) << r.status();
}

TEST(AddNKernelTest, SumsAllInputs) {
  Tensor a = RandomTensor({4, 3}, 1), c = RandomTensor({4, 3}, 2), d = RandomTensor({4, 3}, 3);
  Graph g;
  GraphBuilder b(&g);
  Output y = ops::AddN(&b, {b.Placeholder(DType::kFloat32, {4, 3}, "x0"), b.Placeholder(DType::kFloat32, {4, 3}, "x1"),
                            b.Placeholder(DType::kFloat32, {4, 3}, "x2")});
  Output one = ops::AddN(&b, {Output(g.FindNode("x0"))});
  Tensor want(DType::kFloat32, {4, 3});
  for (int i = 0; i < 12; ++i) want.data<float>()[i] = a.data<float>()[i] + c.data<float>()[i] + d.data<float>()[i];
  EXPECT_LT(MaxAbsDiff(RunOp(g, {a, c, d}, y), want), 1e-6);
  EXPECT_EQ(MaxAbsDiff(RunOp(g, {a, c, d}, one), a), 0);
}

TEST(ReductionKernelTest, SumMeanAndTheirGradients) {
  Tensor x = RandomTensor({7, 9}, 11);
  Graph g;
  GraphBuilder b(&g);
  Output xo = b.Placeholder(DType::kFloat32, {-1, 9}, "x0");
  Output gs = b.Placeholder(DType::kFloat32, {}, "x1");
  Output sum = ops::Sum(&b, xo), mean = ops::Mean(&b, xo);
  Output sum_grad = ops::SumGrad(&b, gs, xo), mean_grad = ops::MeanGrad(&b, gs, xo);
  double s = 0;
  for (float v : x.flat<float>()) s += v;
  const std::vector<Tensor> in = {x, FloatTensor({}, {3.0f})};
  EXPECT_NEAR(RunOp(g, in, sum).data<float>()[0], s, 1e-4);
  EXPECT_NEAR(RunOp(g, in, mean).data<float>()[0], s / 63, 1e-5);
  Tensor sg = RunOp(g, in, sum_grad), mg = RunOp(g, in, mean_grad);
  ASSERT_EQ(sg.shape(), x.shape());
  ASSERT_EQ(mg.shape(), x.shape());
  for (int i = 0; i < 63; ++i) {
    EXPECT_EQ(sg.data<float>()[i], 3.0f);
    EXPECT_FLOAT_EQ(mg.data<float>()[i], 3.0f / 63);
  }
}

TEST(RowKernelTest, ScaleRowsAndRowDot) {
  Tensor m = RandomTensor({3, 4}, 1), s = RandomTensor({3}, 2), m2 = RandomTensor({3, 4}, 3);
  Graph g;
  GraphBuilder b(&g);
  Output mo = b.Placeholder(DType::kFloat32, {-1, 4}, "x0");
  Output scaled = ops::ScaleRows(&b, mo, b.Placeholder(DType::kFloat32, {-1}, "x1"));
  Output dot = ops::RowDot(&b, mo, b.Placeholder(DType::kFloat32, {-1, 4}, "x2"));
  Tensor w_scaled(DType::kFloat32, {3, 4}), w_dot = FloatTensor({3}, {0, 0, 0});
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) {
      w_scaled.data<float>()[i * 4 + j] = m.data<float>()[i * 4 + j] * s.data<float>()[i];
      w_dot.data<float>()[i] += m.data<float>()[i * 4 + j] * m2.data<float>()[i * 4 + j];
    }
  }
  EXPECT_LT(MaxAbsDiff(RunOp(g, {m, s, m2}, scaled), w_scaled), 1e-6);
  EXPECT_LT(MaxAbsDiff(RunOp(g, {m, s, m2}, dot), w_dot), 1e-5);
}

TEST(ArgMaxEqualKernelTest, FirstMaximumAndComparison) {
  Graph g;
  GraphBuilder b(&g);
  Output xo = b.Placeholder(DType::kFloat32, {-1, 4}, "x0");
  Output am = ops::ArgMax(&b, xo);
  Output eq = ops::Equal(&b, am, b.Placeholder(DType::kInt32, {-1}, "x1"));
  Output eqf = ops::Equal(&b, xo, b.Placeholder(DType::kFloat32, {-1, 4}, "x2"));
  ASSERT_TRUE(b.status().ok()) << b.status();
  Tensor x = FloatTensor({3, 4}, {1, 5, 5, 2, -3, -1, -2, -1, 0, 0, 0, 0});
  Tensor labels = IntTensor({3}, {1, 3, 0});
  Tensor x2 = FloatTensor({3, 4}, {1, 5, 0, 2, -3, -1, -2, -1, 0, 0, 0, 1});
  const std::vector<Tensor> in = {x, labels, x2};
  Tensor a = RunOp(g, in, am);
  ASSERT_EQ(a.dtype(), DType::kInt32);
  EXPECT_EQ(std::vector<int32_t>(a.flat<int32_t>().begin(), a.flat<int32_t>().end()),
            (std::vector<int32_t>{1, 1, 0}));
  Tensor e = RunOp(g, in, eq);
  ASSERT_EQ(e.dtype(), DType::kBool);
  EXPECT_TRUE(e.data<bool>()[0]);
  EXPECT_FALSE(e.data<bool>()[1]);
  EXPECT_TRUE(e.data<bool>()[2]);
  Tensor ef = RunOp(g, in, eqf);
  int equal = 0;
  for (bool v : ef.flat<bool>()) equal += v;
  EXPECT_EQ(equal, 10);
}

}  // namespace
}  // namespace weft
