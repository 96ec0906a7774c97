// LayerNorm and LayerNormGrad against references computed here in double
// (rows near zero and rows with a large offset, on one thread and split
// across a pool), an empty batch, and the refusals of bad input by the shape
// functions and by the kernels. (The gradient as a whole: gradient_check_test.)
#include <cmath>
#include <string>
#include <vector>

#include "graph/builder.h"
#include "graph/gradients.h"
#include "graph/ops/ops.h"
#include "gtest/gtest.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace {

using testing::FloatTensor;
using testing::RandomTensor;
using testing::RunGraph;
using testing::StatusHas;

// x of `shape` in [-3, 3], every odd row moved by +1000 (float sums of x^2
// would lose these rows' variance entirely).
Tensor WithOffsetRows(const TensorShape& shape, uint64_t seed) {
  Tensor x = RandomTensor(shape, seed, -3.0f, 3.0f);
  const int64_t c = shape.dim(shape.rank() - 1);
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.NumElements(); ++i) {
    if ((i / c) % 2 == 1) p[i] += 1000.0f;
  }
  return x;
}

// Per row of c channels: the mean and 1 / sqrt(biased variance + eps), in double.
void RowMoments(const Tensor& x, int64_t c, double eps, std::vector<double>* mean, std::vector<double>* inv_std) {
  const int64_t rows = x.NumElements() / c;
  const float* p = x.data<float>();
  mean->assign(rows, 0.0);
  inv_std->assign(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0.0, q = 0.0;
    for (int64_t j = 0; j < c; ++j) s += p[r * c + j];
    const double m = s / c;
    for (int64_t j = 0; j < c; ++j) q += (p[r * c + j] - m) * (p[r * c + j] - m);
    (*mean)[r] = m;
    (*inv_std)[r] = 1.0 / std::sqrt(q / c + eps);
  }
}

void ExpectForwardMatchesReference(const TensorShape& shape, int threads) {
  SCOPED_TRACE(shape.DebugString() + " on " + std::to_string(threads) + " threads");
  const int64_t c = shape.dim(shape.rank() - 1);
  Tensor x = WithOffsetRows(shape, 1);
  Tensor gamma = RandomTensor({c}, 2, 0.5f, 2.0f), beta = RandomTensor({c}, 3);
  Graph g;
  GraphBuilder b(&g);
  std::vector<int64_t> dims(shape.rank(), -1);
  dims.back() = c;
  Output xo = b.Placeholder(DType::kFloat32, TensorShape(dims), "x");
  b.AddNode("LayerNorm", {xo, b.Const(gamma, "gamma"), b.Const(beta, "beta")}, {Attr("epsilon", 1e-2f)}, "ln");
  ASSERT_TRUE(b.status().ok()) << b.status();
  std::vector<Tensor> out;
  absl::Status s = RunGraph(g, {{"x", x}}, {"ln:0", "ln:1", "ln:2"}, &out, threads);
  ASSERT_TRUE(s.ok()) << s;
  const int64_t rows = x.NumElements() / c;
  ASSERT_EQ(out[1].shape(), TensorShape({rows}));
  ASSERT_EQ(out[2].shape(), TensorShape({rows}));
  std::vector<double> mean, inv_std;
  RowMoments(x, c, 1e-2, &mean, &inv_std);
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_NEAR(out[1].data<float>()[r], mean[r], 1e-6 * std::abs(mean[r]) + 1e-6) << "row " << r;
    ASSERT_NEAR(out[2].data<float>()[r], inv_std[r], 1e-5 * inv_std[r]) << "row " << r;
    // The mean is stored in float: half an ulp of it, scaled into y.
    const double tol = 2e-5 + 1e-7 * std::abs(mean[r]) * inv_std[r] * 2.0;
    for (int64_t j = 0; j < c; ++j) {
      const int64_t i = r * c + j;
      const double want = (x.data<float>()[i] - mean[r]) * inv_std[r] * gamma.data<float>()[j] + beta.data<float>()[j];
      ASSERT_NEAR(out[0].data<float>()[i], want, tol) << "row " << r << " channel " << j;
    }
  }
}

TEST(LayerNormKernelTest, NormalisesEachRowOverItsChannels) {
  ExpectForwardMatchesReference({6, 5}, 1);
  ExpectForwardMatchesReference({2, 3, 4, 7}, 1);
  ExpectForwardMatchesReference({1, 1}, 1);  // one value: y = beta
  // Enough work for the rows to be split across the pool.
  ExpectForwardMatchesReference({513, 300}, 4);
}

void ExpectGradMatchesReference(const TensorShape& shape, int threads) {
  SCOPED_TRACE(shape.DebugString() + " on " + std::to_string(threads) + " threads");
  const int64_t c = shape.dim(shape.rank() - 1);
  const int64_t rows = shape.num_elements() / c;
  Tensor x = WithOffsetRows(shape, 4);
  Tensor dy = RandomTensor(shape, 5), gamma = RandomTensor({c}, 6, 0.5f, 2.0f);
  std::vector<double> mean, inv_std;
  RowMoments(x, c, 1e-3, &mean, &inv_std);
  Tensor mean_t(DType::kFloat32, {rows}), inv_std_t(DType::kFloat32, {rows});
  for (int64_t r = 0; r < rows; ++r) {
    mean_t.data<float>()[r] = static_cast<float>(mean[r]);
    inv_std_t.data<float>()[r] = static_cast<float>(inv_std[r]);
  }
  Graph g;
  GraphBuilder b(&g);
  Output dyo = b.Placeholder(DType::kFloat32, shape, "dy");
  Output xo = b.Placeholder(DType::kFloat32, shape, "x");
  b.AddNode("LayerNormGrad", {dyo, xo, b.Const(gamma), b.Const(mean_t), b.Const(inv_std_t)}, {}, "grad");
  ASSERT_TRUE(b.status().ok()) << b.status();
  std::vector<Tensor> out;
  absl::Status s = RunGraph(g, {{"dy", dy}, {"x", x}}, {"grad:0", "grad:1", "grad:2"}, &out, threads);
  ASSERT_TRUE(s.ok()) << s;
  // The reference, in double from the same float statistics.
  const float* dyp = dy.data<float>();
  const float* xp = x.data<float>();
  const float* gp = gamma.data<float>();
  std::vector<double> dgamma(c, 0.0), dbeta(c, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double m = mean_t.data<float>()[r], is = inv_std_t.data<float>()[r];
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t j = 0; j < c; ++j) {
      const int64_t i = r * c + j;
      const double xhat = (xp[i] - m) * is;
      sum_g += dyp[i] * gp[j];
      sum_gx += dyp[i] * gp[j] * xhat;
      dgamma[j] += dyp[i] * xhat;
      dbeta[j] += dyp[i];
    }
    for (int64_t j = 0; j < c; ++j) {
      const int64_t i = r * c + j;
      const double xhat = (xp[i] - m) * is;
      const double want = is * (dyp[i] * gp[j] - sum_g / c - xhat * sum_gx / c);
      ASSERT_NEAR(out[0].data<float>()[i], want, 1e-5 * (1.0 + std::abs(want))) << "row " << r << " channel " << j;
    }
  }
  for (int64_t j = 0; j < c; ++j) {
    EXPECT_NEAR(out[1].data<float>()[j], dgamma[j], 1e-5 * (1.0 + std::abs(dgamma[j]))) << j;
    EXPECT_NEAR(out[2].data<float>()[j], dbeta[j], 1e-5 * (1.0 + std::abs(dbeta[j]))) << j;
  }
}

TEST(LayerNormKernelTest, GradientMatchesTheReference) {
  ExpectGradMatchesReference({6, 5}, 1);
  ExpectGradMatchesReference({2, 3, 4, 7}, 1);
  ExpectGradMatchesReference({513, 300}, 4);
  ExpectGradMatchesReference({4096, 3}, 4);  // few channels, many rows
}

TEST(LayerNormKernelTest, AnEmptyBatchHasEmptyOutputsAndZeroSums) {
  Graph g;
  GraphBuilder b(&g);
  Output xo = b.Placeholder(DType::kFloat32, {-1, -1, 4}, "x");
  Output gamma = b.Const(RandomTensor({4}, 1)), beta = b.Const(RandomTensor({4}, 2));
  Node* ln = b.AddNode("LayerNorm", {xo, gamma, beta}, {}, "ln");
  ASSERT_NE(ln, nullptr) << b.status();
  b.AddNode("LayerNormGrad", {xo, xo, gamma, Output(ln, 1), Output(ln, 2)}, {}, "grad");
  ASSERT_TRUE(b.status().ok()) << b.status();
  for (const TensorShape& s : {TensorShape{0, 3, 4}, TensorShape{2, 0, 4}}) {
    std::vector<Tensor> out;
    absl::Status st = RunGraph(g, {{"x", Tensor(DType::kFloat32, s)}},
                               {"ln:0", "ln:1", "ln:2", "grad:0", "grad:1", "grad:2"}, &out);
    ASSERT_TRUE(st.ok()) << s.DebugString() << ": " << st;
    EXPECT_EQ(out[0].shape(), s);
    EXPECT_EQ(out[1].shape(), TensorShape({0}));
    EXPECT_EQ(out[2].shape(), TensorShape({0}));
    EXPECT_EQ(out[3].shape(), s);
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(out[4].data<float>()[j], 0.0f) << j;
      EXPECT_EQ(out[5].data<float>()[j], 0.0f) << j;
    }
  }
}

TEST(LayerNormShapeTest, InfersRowStatisticsAndRefusesBadInputByRole) {
  Graph g;
  GraphBuilder b(&g);
  Output v4 = b.Const(RandomTensor({4}, 1));
  Node* ln = b.AddNode("LayerNorm", {b.Placeholder(DType::kFloat32, {8, 3, 4}, "x"), v4, v4}, {}, "ln");
  ASSERT_NE(ln, nullptr) << b.status();
  EXPECT_EQ(ln->output_shape(0), TensorShape({8, 3, 4}));
  EXPECT_EQ(ln->output_shape(1), TensorShape({24}));
  EXPECT_EQ(ln->output_shape(2), TensorShape({24}));
  Node* unknown = b.AddNode("LayerNorm", {b.Placeholder(DType::kFloat32, {-1, 3, -1}, "u"), v4, v4}, {}, "ln_u");
  ASSERT_NE(unknown, nullptr) << b.status();
  EXPECT_EQ(unknown->output_shape(0), TensorShape({-1, 3, 4}));  // the last axis from gamma
  EXPECT_EQ(unknown->output_shape(1), TensorShape({-1}));

  struct Case {
    std::vector<TensorShape> shapes;  // LayerNorm's, or LayerNormGrad's with five
    AttrList attrs;
    std::vector<std::string> want;
  };
  for (const Case& c : std::vector<Case>{
           {{{2, 3}, {4}, {3}}, {}, {"bad", "LayerNorm", "gamma [4]", "channel of x"}},
           {{{2, 3}, {3}, {2}}, {}, {"beta [2]"}},
           {{{3}, {3}, {3}}, {}, {"x (batch, ..., channels) must have rank >= 2"}},
           {{{2, 0}, {0}, {0}}, {}, {"empty last axis"}},
           {{{2, 3}, {3}, {3}}, {Attr("epsilon", -1.0f)}, {"epsilon must be positive"}},
           {{{2, 3}, {3}, {3}}, {Attr("epsilon", INFINITY)}, {"epsilon must be positive"}},
           {{{2, 3}, {2, 3}, {3}, {3}, {2}}, {}, {"LayerNormGrad", "mean [3]", "row of x"}},
           {{{2, 3}, {2, 3}, {3}, {2}, {3}}, {}, {"inv_std [3]", "row of x"}},
           {{{3, 2}, {2, 3}, {3}, {2}, {2}}, {}, {"dy [3,2] must have x's shape [2,3]"}},
           {{{2, 3}, {2, 3}, {2}, {2}, {2}}, {}, {"gamma [2]"}},
       }) {
    Graph gc;
    GraphBuilder bc(&gc);
    std::vector<Output> in;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      in.push_back(bc.Placeholder(DType::kFloat32, c.shapes[i], "in" + std::to_string(i)));
    }
    bc.AddNode(c.shapes.size() == 3 ? "LayerNorm" : "LayerNormGrad", in, c.attrs, "bad");
    ASSERT_FALSE(bc.status().ok()) << c.want[0];
    EXPECT_EQ(bc.status().code(), absl::StatusCode::kInvalidArgument) << bc.status();
    for (const std::string& w : c.want) EXPECT_TRUE(StatusHas(bc.status(), w)) << w << " in " << bc.status();
  }
}

// Shapes hidden from inference: the kernels refuse what the shape functions would.
TEST(LayerNormKernelTest, KernelsRefuseWhatInferenceCouldNotSee) {
  Graph g;
  GraphBuilder b(&g);
  auto unknown = [&](const char* name, int rank) {
    return b.Placeholder(DType::kFloat32, TensorShape(std::vector<int64_t>(rank, -1)), name);
  };
  Output x = unknown("x", 2), dy = unknown("dy", 2), gamma = unknown("gamma", 1), beta = unknown("beta", 1);
  Output mean = unknown("mean", 1), inv_std = unknown("inv_std", 1);
  b.AddNode("LayerNorm", {x, gamma, beta}, {}, "ln");
  b.AddNode("LayerNormGrad", {dy, x, gamma, mean, inv_std}, {}, "grad");
  ASSERT_TRUE(b.status().ok()) << b.status();
  struct Case {
    Tensor x, gamma, dy, mean;
    const char* fetch;
    const char* want;
  };
  for (const Case& c : std::vector<Case>{
           {RandomTensor({2, 3}, 1), RandomTensor({4}, 2), RandomTensor({2, 3}, 3), RandomTensor({2}, 4), "ln:0",
            "gamma [4] needs one entry per channel"},
           {RandomTensor({2, 0}, 1), RandomTensor({0}, 2), RandomTensor({2, 0}, 3), RandomTensor({2}, 4), "ln:0",
            "empty last axis"},
           {RandomTensor({2, 3}, 1), RandomTensor({3}, 2), RandomTensor({2, 3}, 3), RandomTensor({3}, 4), "grad:0",
            "mean [3] needs one entry per row"},
           {RandomTensor({2, 3}, 1), RandomTensor({3}, 2), RandomTensor({3, 2}, 3), RandomTensor({2}, 4), "grad:0",
            "dy"},
       }) {
    std::vector<Tensor> out;
    absl::Status s = RunGraph(g,
                              {{"x", c.x},
                               {"gamma", c.gamma},
                               {"beta", c.gamma},
                               {"dy", c.dy},
                               {"mean", c.mean},
                               {"inv_std", c.mean}},
                              {c.fetch}, &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.want << ": " << s;
    EXPECT_TRUE(StatusHas(s, c.want)) << c.want << " in " << s;
  }
}

TEST(LayerNormGradientTest, OnlyYCarriesAGradient) {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {4, 3}, "x");
  Output v = b.Const(RandomTensor({3}, 1));
  Node* ln = b.AddNode("LayerNorm", {x, v, v}, {}, "ln");
  ASSERT_NE(ln, nullptr) << b.status();
  auto through_y = AddGradients(&b, ops::Sum(&b, Output(ln, 0)), {x});
  ASSERT_TRUE(through_y.ok()) << through_y.status();
  EXPECT_EQ((*through_y)[0].node->op(), "LayerNormGrad");
  auto through_mean = AddGradients(&b, ops::Sum(&b, Output(ln, 1)), {x});
  EXPECT_FALSE(through_mean.ok());
  EXPECT_TRUE(StatusHas(through_mean.status(), "row statistics")) << through_mean.status();
}

}  // namespace
}  // namespace weft
