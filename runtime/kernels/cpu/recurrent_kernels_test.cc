// LSTM and GRU against the recurrences written out here in double, step by step, and
// its refusals of bad input: by node name when the graph is built, by
// operand when shapes arrive at run time. (Its gradient:
// gradient_check_test.)
#include <cmath>
#include <vector>

#include "graph/builder.h"
#include "gtest/gtest.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace {

using testing::RandomTensor;
using testing::RunGraph;
using testing::StatusHas;

double Sig(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// h [B, T, H] by the textbook recurrence, gates in Keras's order i, f, g, o.
std::vector<double> ReferenceLstm(const Tensor& x, const Tensor& w, const Tensor& u, const Tensor& bias) {
  const int64_t B = x.shape().dim(0), T = x.shape().dim(1), F = x.shape().dim(2), H = u.shape().dim(0);
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  const float* up = u.data<float>();
  const float* bp = bias.data<float>();
  std::vector<double> h(B * T * H);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> hp(H, 0.0), cp(H, 0.0);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> z(4 * H);
      for (int64_t j = 0; j < 4 * H; ++j) {
        z[j] = bp[j];
        for (int64_t f = 0; f < F; ++f) z[j] += xp[(b * T + t) * F + f] * wp[f * 4 * H + j];
        for (int64_t k = 0; k < H; ++k) z[j] += hp[k] * up[k * 4 * H + j];
      }
      for (int64_t k = 0; k < H; ++k) {
        cp[k] = Sig(z[H + k]) * cp[k] + Sig(z[k]) * std::tanh(z[2 * H + k]);
        hp[k] = Sig(z[3 * H + k]) * std::tanh(cp[k]);
        h[(b * T + t) * H + k] = hp[k];
      }
    }
  }
  return h;
}

TEST(LstmKernelTest, MatchesTheRecurrenceAndItsLastStep) {
  const Tensor x = RandomTensor({3, 5, 4}, 1), w = RandomTensor({4, 12}, 2), u = RandomTensor({3, 12}, 3),
               bias = RandomTensor({12}, 4);
  const std::vector<double> want = ReferenceLstm(x, w, u, bias);
  for (bool sequences : {true, false}) {
    Graph g;
    GraphBuilder b(&g);
    Output xo = b.Placeholder(DType::kFloat32, {-1, 5, 4}, "x");
    b.AddNode("LSTM", {xo, b.Const(w), b.Const(u), b.Const(bias)}, {Attr("return_sequences", sequences)}, "lstm");
    ASSERT_TRUE(b.status().ok()) << b.status();
    std::vector<Tensor> out;
    ASSERT_TRUE(RunGraph(g, {{"x", x}}, {"lstm:0", "lstm:1"}, &out).ok());
    ASSERT_EQ(out[1].NumElements(), static_cast<int64_t>(want.size()));
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(out[1].data<float>()[i], want[i], 1e-5) << i;
    if (sequences) {
      EXPECT_EQ(out[0].shape(), TensorShape({3, 5, 3}));
      EXPECT_EQ(testing::MaxAbsDiff(out[0], out[1]), 0.0);
    } else {
      ASSERT_EQ(out[0].shape(), TensorShape({3, 3}));
      for (int64_t bb = 0; bb < 3; ++bb) {
        for (int64_t k = 0; k < 3; ++k) EXPECT_NEAR(out[0].data<float>()[bb * 3 + k], want[(bb * 5 + 4) * 3 + k], 1e-5);
      }
    }
  }
}

// h [B, T, H] of Keras's GRU (reset_after): gates z, r, n; bias row 0 the
// input side's, row 1 the recurrent side's.
std::vector<double> ReferenceGru(const Tensor& x, const Tensor& w, const Tensor& u, const Tensor& bias) {
  const int64_t B = x.shape().dim(0), T = x.shape().dim(1), F = x.shape().dim(2), H = u.shape().dim(0);
  const float* bp = bias.data<float>();
  std::vector<double> h(B * T * H);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> hp(H, 0.0);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> xi(3 * H), hi(3 * H);
      for (int64_t j = 0; j < 3 * H; ++j) {
        xi[j] = bp[j];
        hi[j] = bp[3 * H + j];
        for (int64_t f = 0; f < F; ++f) xi[j] += x.data<float>()[(b * T + t) * F + f] * w.data<float>()[f * 3 * H + j];
        for (int64_t k = 0; k < H; ++k) hi[j] += hp[k] * u.data<float>()[k * 3 * H + j];
      }
      std::vector<double> next(H);
      for (int64_t k = 0; k < H; ++k) {
        const double z = Sig(xi[k] + hi[k]), r = Sig(xi[H + k] + hi[H + k]);
        const double n = std::tanh(xi[2 * H + k] + r * hi[2 * H + k]);
        next[k] = z * hp[k] + (1 - z) * n;
        h[(b * T + t) * H + k] = next[k];
      }
      hp = next;
    }
  }
  return h;
}

TEST(GruKernelTest, MatchesTheRecurrence) {
  const Tensor x = RandomTensor({3, 4, 5}, 11), w = RandomTensor({5, 9}, 12), u = RandomTensor({3, 9}, 13),
               bias = RandomTensor({2, 9}, 14);
  const std::vector<double> want = ReferenceGru(x, w, u, bias);
  Graph g;
  GraphBuilder b(&g);
  Output xo = b.Placeholder(DType::kFloat32, {-1, 4, 5}, "x");
  b.AddNode("GRU", {xo, b.Const(w), b.Const(u), b.Const(bias)}, {Attr("return_sequences", false)}, "gru");
  ASSERT_TRUE(b.status().ok()) << b.status();
  std::vector<Tensor> out;
  ASSERT_TRUE(RunGraph(g, {{"x", x}}, {"gru:0", "gru:1"}, &out).ok());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(out[1].data<float>()[i], want[i], 1e-5) << i;
  ASSERT_EQ(out[0].shape(), TensorShape({3, 3}));
  for (int64_t bb = 0; bb < 3; ++bb) {
    for (int64_t k = 0; k < 3; ++k) EXPECT_NEAR(out[0].data<float>()[bb * 3 + k], want[(bb * 4 + 3) * 3 + k], 1e-5);
  }
  // An LSTM-shaped [3 units] bias is not a GRU's [2, 3 units].
  b.AddNode("GRU", {xo, b.Const(w), b.Const(u), b.Const(RandomTensor({9}, 15))}, {}, "bad_gru");
  EXPECT_TRUE(StatusHas(b.status(), "bad_gru")) << b.status();
  EXPECT_TRUE(StatusHas(b.status(), "bias must have rank 2")) << b.status();
}

TEST(LstmKernelTest, RefusesMismatchedOperandsByNameAndAtRunTime) {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {-1, -1, 4}, "x");
  b.AddNode("LSTM", {x, b.Const(RandomTensor({4, 12}, 1)), b.Const(RandomTensor({3, 8}, 2)),
                     b.Const(RandomTensor({12}, 3))},
            {}, "bad_lstm");
  EXPECT_TRUE(StatusHas(b.status(), "bad_lstm")) << b.status();
  EXPECT_TRUE(StatusHas(b.status(), "recurrent_kernel [3,8]")) << b.status();

  Graph g2;
  GraphBuilder b2(&g2);
  Output x2 = b2.Placeholder(DType::kFloat32, {-1, -1, -1}, "x");
  Output w = b2.Placeholder(DType::kFloat32, {-1, -1}, "w");
  b2.AddNode("LSTM", {x2, w, b2.Const(RandomTensor({3, 12}, 2)), b2.Const(RandomTensor({12}, 3))}, {}, "lstm");
  ASSERT_TRUE(b2.status().ok()) << b2.status();
  std::vector<Tensor> out;
  absl::Status wrong =
      RunGraph(g2, {{"x", RandomTensor({2, 3, 4}, 4)}, {"w", RandomTensor({5, 12}, 5)}}, {"lstm:0"}, &out);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument) << wrong;
  EXPECT_TRUE(StatusHas(wrong, "kernel [5,12]")) << wrong;
  absl::Status empty =
      RunGraph(g2, {{"x", RandomTensor({2, 0, 4}, 4)}, {"w", RandomTensor({4, 12}, 5)}}, {"lstm:0"}, &out);
  EXPECT_TRUE(StatusHas(empty, "steps >= 1")) << empty;
}

// The LSTM's initialisers: an orthogonal matrix has orthonormal rows (when
// it is wide) or columns (when tall); unit_forget_bias is 1 on the forget
// gate's quarter only. Both refuse a shape they cannot fill, by node name.
TEST(LstmInitialisersTest, OrthogonalAndUnitForgetBias) {
  for (const TensorShape& shape : {TensorShape{3, 12}, TensorShape{12, 3}, TensorShape{5, 5}}) {
    Graph g;
    GraphBuilder b(&g);
    b.Variable("w", DType::kFloat32, shape, "orthogonal", 7);
    ASSERT_TRUE(b.status().ok()) << b.status();
    std::vector<Tensor> out;
    ASSERT_TRUE(RunGraph(g, {}, {"w"}, &out).ok());
    const int64_t rows = shape.dim(0), cols = shape.dim(1);
    const bool wide = rows <= cols;
    const int64_t n = wide ? rows : cols, len = wide ? cols : rows;
    auto at = [&](int64_t v, int64_t k) { return out[0].data<float>()[wide ? v * cols + k : k * cols + v]; };
    for (int64_t a = 0; a < n; ++a) {
      for (int64_t c = 0; c < n; ++c) {
        double dot = 0;
        for (int64_t k = 0; k < len; ++k) dot += at(a, k) * at(c, k);
        EXPECT_NEAR(dot, a == c ? 1.0 : 0.0, 1e-5) << shape.DebugString() << " " << a << "," << c;
      }
    }
  }
  Graph g;
  GraphBuilder b(&g);
  b.Variable("bias", DType::kFloat32, {8}, "unit_forget_bias");
  ASSERT_TRUE(b.status().ok()) << b.status();
  std::vector<Tensor> out;
  ASSERT_TRUE(RunGraph(g, {}, {"bias"}, &out).ok());
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(out[0].data<float>()[i], i >= 2 && i < 4 ? 1.0f : 0.0f) << i;

  for (const auto& [init, shape] : {std::pair{"orthogonal", TensorShape{4}}, {"unit_forget_bias", TensorShape{6}}}) {
    Graph bad;
    GraphBuilder bb(&bad);
    bb.Variable("bad_init", DType::kFloat32, shape, init);
    EXPECT_TRUE(StatusHas(bb.status(), "bad_init")) << bb.status();
    EXPECT_TRUE(StatusHas(bb.status(), init)) << bb.status();
  }
}

}  // namespace
}  // namespace weft
