// Attention and AttentionGrad against references computed here in double
// (one head and several, causal and not, on one thread and split across a
// pool), scores large enough to overflow a softmax that skipped the row
// maximum, an empty batch, and the refusals of bad input by the shape
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

using testing::RandomTensor;
using testing::RunGraph;
using testing::StatusHas;

// A problem's geometry and its double reference.
struct Problem {
  int64_t batch, seq, width, heads;
  bool causal;
  int64_t dh() const { return width / heads; }
  int64_t At(int64_t b, int64_t i, int64_t h, int64_t d) const { return (b * seq + i) * width + h * dh() + d; }
  int64_t P(int64_t b, int64_t h, int64_t i, int64_t j) const { return ((b * heads + h) * seq + i) * seq + j; }
  std::string Describe() const {
    return "[" + std::to_string(batch) + "," + std::to_string(seq) + "," + std::to_string(width) + "] heads " +
           std::to_string(heads) + (causal ? " causal" : "");
  }
};

// probs and out in double.
void Reference(const Problem& pr, const Tensor& q, const Tensor& k, const Tensor& v, std::vector<double>* probs,
               std::vector<double>* out) {
  const float *qp = q.data<float>(), *kp = k.data<float>(), *vp = v.data<float>();
  probs->assign(pr.batch * pr.heads * pr.seq * pr.seq, 0.0);
  out->assign(q.NumElements(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(pr.dh()));
  for (int64_t b = 0; b < pr.batch; ++b) {
    for (int64_t h = 0; h < pr.heads; ++h) {
      for (int64_t i = 0; i < pr.seq; ++i) {
        const int64_t limit = pr.causal ? i + 1 : pr.seq;
        std::vector<double> s(limit);
        double m = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < limit; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < pr.dh(); ++d) dot += double{qp[pr.At(b, i, h, d)]} * kp[pr.At(b, j, h, d)];
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        for (int64_t j = 0; j < limit; ++j) sum += std::exp(s[j] - m);
        for (int64_t j = 0; j < limit; ++j) {
          const double p = std::exp(s[j] - m) / sum;
          (*probs)[pr.P(b, h, i, j)] = p;
          for (int64_t d = 0; d < pr.dh(); ++d) (*out)[pr.At(b, i, h, d)] += p * vp[pr.At(b, j, h, d)];
        }
      }
    }
  }
}

AttrList Attrs(const Problem& pr) { return {Attr("num_heads", pr.heads), Attr("causal", pr.causal)}; }

void ExpectForwardMatchesReference(const Problem& pr, int threads, float range = 2.0f) {
  SCOPED_TRACE(pr.Describe() + " on " + std::to_string(threads) + " threads");
  const TensorShape shape{pr.batch, pr.seq, pr.width};
  Tensor q = RandomTensor(shape, 1, -range, range), k = RandomTensor(shape, 2, -range, range);
  Tensor v = RandomTensor(shape, 3);
  Graph g;
  GraphBuilder b(&g);
  const TensorShape unknown{-1, -1, pr.width};
  b.AddNode("Attention",
            {b.Placeholder(DType::kFloat32, unknown, "q"), b.Placeholder(DType::kFloat32, unknown, "k"),
             b.Placeholder(DType::kFloat32, unknown, "v")},
            Attrs(pr), "attn");
  ASSERT_TRUE(b.status().ok()) << b.status();
  std::vector<Tensor> out;
  absl::Status s = RunGraph(g, {{"q", q}, {"k", k}, {"v", v}}, {"attn:0", "attn:1"}, &out, threads);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(out[0].shape(), shape);
  ASSERT_EQ(out[1].shape(), TensorShape({pr.batch, pr.heads, pr.seq, pr.seq}));
  std::vector<double> probs, want;
  Reference(pr, q, k, v, &probs, &want);
  for (int64_t i = 0; i < out[1].NumElements(); ++i) {
    const float got = out[1].data<float>()[i];
    ASSERT_FALSE(std::isnan(got)) << "probs " << i;
    if (probs[i] == 0.0) {
      ASSERT_EQ(got, 0.0f) << "probs " << i << " is masked";
    } else {
      ASSERT_NEAR(got, probs[i], 2e-6 + 1e-5 * probs[i]) << "probs " << i;
    }
  }
  for (int64_t i = 0; i < out[0].NumElements(); ++i) {
    ASSERT_NEAR(out[0].data<float>()[i], want[i], 1e-5 * (1.0 + std::abs(want[i]))) << "out " << i;
  }
}

TEST(AttentionKernelTest, MatchesTheReference) {
  for (bool causal : {false, true}) {
    ExpectForwardMatchesReference({2, 5, 6, 1, causal}, 1);
    ExpectForwardMatchesReference({2, 5, 6, 3, causal}, 1);
    ExpectForwardMatchesReference({3, 7, 8, 2, causal}, 1);
    ExpectForwardMatchesReference({1, 1, 4, 4, causal}, 1);  // one position, one value per head
    // Enough work for the pairs to be split across the pool.
    ExpectForwardMatchesReference({4, 48, 64, 4, causal}, 4);
  }
}

TEST(AttentionKernelTest, LargeScoresStayFinite) {
  // Scores in the thousands: exp without the row maximum would overflow.
  ExpectForwardMatchesReference({2, 6, 4, 2, false}, 1, 60.0f);
  ExpectForwardMatchesReference({2, 6, 4, 2, true}, 1, 60.0f);
}

TEST(AttentionKernelTest, CausalRowZeroReadsOnlyItsOwnValue) {
  const Problem pr{2, 4, 6, 2, true};
  Tensor q = RandomTensor({2, 4, 6}, 1), k = RandomTensor({2, 4, 6}, 2), v = RandomTensor({2, 4, 6}, 3);
  Graph g;
  GraphBuilder b(&g);
  b.AddNode("Attention", {b.Const(q), b.Const(k), b.Const(v)}, Attrs(pr), "attn");
  ASSERT_TRUE(b.status().ok()) << b.status();
  std::vector<Tensor> out;
  ASSERT_TRUE(RunGraph(g, {}, {"attn:0"}, &out).ok());
  for (int64_t bb = 0; bb < 2; ++bb) {
    for (int64_t c = 0; c < 6; ++c) {
      EXPECT_FLOAT_EQ(out[0].data<float>()[bb * 24 + c], v.data<float>()[bb * 24 + c]) << bb << " " << c;
    }
  }
}

void ExpectGradMatchesReference(const Problem& pr, int threads) {
  SCOPED_TRACE(pr.Describe() + " on " + std::to_string(threads) + " threads");
  const TensorShape shape{pr.batch, pr.seq, pr.width};
  Tensor q = RandomTensor(shape, 4, -2.0f, 2.0f), k = RandomTensor(shape, 5, -2.0f, 2.0f);
  Tensor v = RandomTensor(shape, 6), dout = RandomTensor(shape, 7);
  std::vector<double> probs, unused;
  Reference(pr, q, k, v, &probs, &unused);
  Tensor probs_t(DType::kFloat32, {pr.batch, pr.heads, pr.seq, pr.seq});
  for (size_t i = 0; i < probs.size(); ++i) probs_t.data<float>()[i] = static_cast<float>(probs[i]);
  Graph g;
  GraphBuilder b(&g);
  b.AddNode("AttentionGrad",
            {b.Placeholder(DType::kFloat32, shape, "dout"), b.Const(q), b.Const(k), b.Const(v), b.Const(probs_t)},
            {Attr("num_heads", pr.heads)}, "grad");
  ASSERT_TRUE(b.status().ok()) << b.status();
  std::vector<Tensor> out;
  absl::Status s = RunGraph(g, {{"dout", dout}}, {"grad:0", "grad:1", "grad:2"}, &out, threads);
  ASSERT_TRUE(s.ok()) << s;
  // The reference, in double from the same float probabilities.
  const float *qp = q.data<float>(), *kp = k.data<float>(), *vp = v.data<float>(), *op = dout.data<float>();
  const double scale = 1.0 / std::sqrt(static_cast<double>(pr.dh()));
  std::vector<double> dq(q.NumElements(), 0.0), dk(dq), dv(dq);
  for (int64_t b0 = 0; b0 < pr.batch; ++b0) {
    for (int64_t h = 0; h < pr.heads; ++h) {
      for (int64_t i = 0; i < pr.seq; ++i) {
        std::vector<double> dp(pr.seq, 0.0);
        double dot = 0.0;
        for (int64_t j = 0; j < pr.seq; ++j) {
          const double p = probs_t.data<float>()[pr.P(b0, h, i, j)];
          for (int64_t d = 0; d < pr.dh(); ++d) {
            dp[j] += double{op[pr.At(b0, i, h, d)]} * vp[pr.At(b0, j, h, d)];
            dv[pr.At(b0, j, h, d)] += p * op[pr.At(b0, i, h, d)];
          }
          dot += p * dp[j];
        }
        for (int64_t j = 0; j < pr.seq; ++j) {
          const double ds = probs_t.data<float>()[pr.P(b0, h, i, j)] * (dp[j] - dot) * scale;
          for (int64_t d = 0; d < pr.dh(); ++d) {
            dq[pr.At(b0, i, h, d)] += ds * kp[pr.At(b0, j, h, d)];
            dk[pr.At(b0, j, h, d)] += ds * qp[pr.At(b0, i, h, d)];
          }
        }
      }
    }
  }
  const char* names[] = {"dq", "dk", "dv"};
  const std::vector<double>* wants[] = {&dq, &dk, &dv};
  for (int o = 0; o < 3; ++o) {
    ASSERT_EQ(out[o].shape(), shape) << names[o];
    for (int64_t i = 0; i < out[o].NumElements(); ++i) {
      const double want = (*wants[o])[i];
      ASSERT_NEAR(out[o].data<float>()[i], want, 2e-5 * (1.0 + std::abs(want))) << names[o] << " " << i;
    }
  }
}

TEST(AttentionKernelTest, GradientMatchesTheReference) {
  for (bool causal : {false, true}) {
    ExpectGradMatchesReference({2, 5, 6, 1, causal}, 1);
    ExpectGradMatchesReference({2, 5, 6, 3, causal}, 1);
    ExpectGradMatchesReference({3, 7, 8, 2, causal}, 1);
    ExpectGradMatchesReference({4, 48, 64, 4, causal}, 4);
  }
}

TEST(AttentionKernelTest, AnEmptyBatchOrSequenceHasEmptyOutputs) {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {-1, -1, 4}, "x");
  Node* attn = b.AddNode("Attention", {x, x, x}, {Attr("num_heads", 2)}, "attn");
  ASSERT_NE(attn, nullptr) << b.status();
  b.AddNode("AttentionGrad", {x, x, x, x, Output(attn, 1)}, {Attr("num_heads", 2)}, "grad");
  ASSERT_TRUE(b.status().ok()) << b.status();
  for (const TensorShape& s : {TensorShape{0, 3, 4}, TensorShape{2, 0, 4}}) {
    std::vector<Tensor> out;
    absl::Status st = RunGraph(g, {{"x", Tensor(DType::kFloat32, s)}}, {"attn:0", "attn:1", "grad:0", "grad:2"}, &out);
    ASSERT_TRUE(st.ok()) << s.DebugString() << ": " << st;
    EXPECT_EQ(out[0].shape(), s);
    EXPECT_EQ(out[1].shape(), TensorShape({s.dim(0), 2, s.dim(1), s.dim(1)}));
    EXPECT_EQ(out[2].shape(), s);
    EXPECT_EQ(out[3].shape(), s);
  }
}

TEST(AttentionShapeTest, InfersShapesAndRefusesBadInputByRole) {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {8, 5, 12}, "x");
  Node* attn = b.AddNode("Attention", {x, x, x}, {Attr("num_heads", 3), Attr("causal", true)}, "attn");
  ASSERT_NE(attn, nullptr) << b.status();
  EXPECT_EQ(attn->output_shape(0), TensorShape({8, 5, 12}));
  EXPECT_EQ(attn->output_shape(1), TensorShape({8, 3, 5, 5}));
  Output u = b.Placeholder(DType::kFloat32, {-1, -1, 12}, "u");
  Output w = b.Placeholder(DType::kFloat32, {-1, 7, -1}, "w");
  Node* unknown = b.AddNode("Attention", {u, w, u}, {Attr("num_heads", 4)}, "attn_u");
  ASSERT_NE(unknown, nullptr) << b.status();
  EXPECT_EQ(unknown->output_shape(0), TensorShape({-1, 7, 12}));
  EXPECT_EQ(unknown->output_shape(1), TensorShape({-1, 4, 7, 7}));

  struct Case {
    std::vector<TensorShape> shapes;  // Attention's three, or AttentionGrad's five
    AttrList attrs;
    std::vector<std::string> want;
  };
  const AttrList two = {Attr("num_heads", 2)};
  for (const Case& c : std::vector<Case>{
           {{{2, 3, 4}, {2, 3, 4}, {2, 3, 6}}, two, {"bad", "Attention", "v [2,3,6] must have q's shape [2,3,4]"}},
           {{{2, 3, 4}, {2, 5, 4}, {2, 3, 4}}, two, {"k [2,5,4] must have q's shape"}},
           {{{3, 4}, {3, 4}, {3, 4}}, two, {"q (batch, seq, heads * head_dim) must have rank 3"}},
           {{{2, 3, 4}, {2, 3, 4, 1}, {2, 3, 4}}, two, {"k (batch, seq, heads * head_dim) must have rank 3"}},
           {{{2, 3, 6}, {2, 3, 6}, {2, 3, 6}}, {Attr("num_heads", 4)}, {"num_heads 4 does not divide", "q [2,3,6]"}},
           {{{2, 3, 4}, {2, 3, 4}, {2, 3, 4}}, {Attr("num_heads", 0)}, {"num_heads must be >= 1, got 0"}},
           {{{2, 3, 0}, {2, 3, 0}, {2, 3, 0}}, {}, {"empty last axis"}},
           {{{2, 3, 4}, {2, 3, 4}, {2, 3, 4}, {2, 3, 4}, {2, 2, 3, 3}}, {Attr("num_heads", 1)},
            {"AttentionGrad", "probs [2,2,3,3] must be [2,1,3,3]"}},
           {{{2, 3, 4}, {2, 3, 4}, {2, 3, 4}, {2, 3, 4}, {2, 3, 3}}, two, {"probs (batch, heads, seq, seq)"}},
           {{{2, 4, 4}, {2, 3, 4}, {2, 3, 4}, {2, 3, 4}, {2, 2, 3, 3}}, two, {"q [2,3,4] must have dout's shape"}},
       }) {
    Graph gc;
    GraphBuilder bc(&gc);
    std::vector<Output> in;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      in.push_back(bc.Placeholder(DType::kFloat32, c.shapes[i], "in" + std::to_string(i)));
    }
    bc.AddNode(c.shapes.size() == 3 ? "Attention" : "AttentionGrad", in, c.attrs, "bad");
    ASSERT_FALSE(bc.status().ok()) << c.want[0];
    EXPECT_EQ(bc.status().code(), absl::StatusCode::kInvalidArgument) << bc.status();
    for (const std::string& w : c.want) EXPECT_TRUE(StatusHas(bc.status(), w)) << w << " in " << bc.status();
  }
}

// Shapes hidden from inference: the kernels refuse what the shape functions would.
TEST(AttentionKernelTest, KernelsRefuseWhatInferenceCouldNotSee) {
  Graph g;
  GraphBuilder b(&g);
  auto unknown = [&](const char* name, int rank) {
    return b.Placeholder(DType::kFloat32, TensorShape(std::vector<int64_t>(rank, -1)), name);
  };
  Output q = unknown("q", 3), k = unknown("k", 3), probs = unknown("probs", 4);
  b.AddNode("Attention", {q, k, k}, {Attr("num_heads", 2)}, "attn");
  b.AddNode("AttentionGrad", {q, q, k, k, probs}, {Attr("num_heads", 2)}, "grad");
  ASSERT_TRUE(b.status().ok()) << b.status();
  struct Case {
    Tensor q, k, probs;
    const char* fetch;
    const char* want;
  };
  for (const Case& c : std::vector<Case>{
           {RandomTensor({2, 3, 4}, 1), RandomTensor({2, 4, 4}, 2), RandomTensor({2, 2, 3, 3}, 3), "attn:0",
            "k [2,4,4] must have q's shape [2,3,4]"},
           {RandomTensor({2, 3, 5}, 1), RandomTensor({2, 3, 5}, 2), RandomTensor({2, 2, 3, 3}, 3), "attn:0",
            "num_heads 2 does not divide"},
           {RandomTensor({2, 3, 0}, 1), RandomTensor({2, 3, 0}, 2), RandomTensor({2, 2, 3, 3}, 3), "attn:0",
            "empty last axis"},
           {RandomTensor({2, 3, 4}, 1), RandomTensor({2, 3, 4}, 2), RandomTensor({2, 2, 3, 2}, 3), "grad:0",
            "probs [2,2,3,2] must be [2,2,3,3]"},
       }) {
    std::vector<Tensor> out;
    absl::Status s = RunGraph(g, {{"q", c.q}, {"k", c.k}, {"probs", c.probs}}, {c.fetch}, &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.want << ": " << s;
    EXPECT_TRUE(StatusHas(s, c.want)) << c.want << " in " << s;
  }
}

TEST(AttentionGradientTest, OnlyOutCarriesAGradient) {
  Graph g;
  GraphBuilder b(&g);
  Output q = b.Placeholder(DType::kFloat32, {2, 3, 4}, "q");
  Output k = b.Placeholder(DType::kFloat32, {2, 3, 4}, "k");
  Node* attn = b.AddNode("Attention", {q, k, k}, {Attr("num_heads", 2), Attr("causal", true)}, "attn");
  ASSERT_NE(attn, nullptr) << b.status();
  auto through_out = AddGradients(&b, ops::Sum(&b, Output(attn, 0)), {q, k});
  ASSERT_TRUE(through_out.ok()) << through_out.status();
  EXPECT_EQ((*through_out)[0].node->op(), "AttentionGrad");
  auto through_probs = AddGradients(&b, ops::Sum(&b, Output(attn, 1)), {q});
  EXPECT_FALSE(through_probs.ok());
  EXPECT_TRUE(StatusHas(through_probs.status(), "probs")) << through_probs.status();
}

}  // namespace
}  // namespace weft
