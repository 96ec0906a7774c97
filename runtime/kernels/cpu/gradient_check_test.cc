// Numerical gradient checks for every op with a gradient function.
//
// Each check perturbs every element of the op's float inputs (see
// runtime/testing/gradient_checker.h); inputs stay away from kinks: Relu
// inputs are at least 0.1 from zero, MaxPool inputs at least 0.05 apart,
// both more than the 0.01 step.
#include <set>
#include <string>

#include "graph/builder.h"
#include "graph/op_registry.h"
#include "graph/ops/ops.h"
#include "gtest/gtest.h"
#include "runtime/testing/gradient_checker.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace {

using testing::CheckGradients;
using testing::DistinctTensor;
using testing::GradientCheckOptions;
using testing::IntTensor;
using testing::RandomAwayFromZero;
using testing::RandomTensor;
using X = std::vector<Output>;

// Ops whose gradients the tests below check; kept in sync with the registry
// by EveryDifferentiableOpIsChecked.
const std::set<std::string>& CheckedOps() {
  static const auto* ops = new std::set<std::string>{
      "Add",     "AddN",      "Attention", "AvgPool", "Concat", "BatchNorm", "BatchNormFromSums", "BatchNormSums", "CrossReplicaSum", "BiasAdd", "Cast", "GlobalAvgPool",      "Conv2D", "GRU", "Dropout",     "Embedding", "Identity", "LayerNorm", "LSTM", "MatMul",
      "MaxPool", "Mean",      "Mul",     "Neg",       "Relu",   "Reshape",     "ReshapeLike", "RowDot",
      "ScaleRows", "Sigmoid", "Softmax", "SparseSoftmaxCrossEntropyWithLogits", "Sub",  "Sum", "Tanh"};
  return *ops;
}

TEST(GradientCheckTest, EveryDifferentiableOpIsChecked) {
  for (const std::string& name : OpRegistry::Global()->OpNames()) {
    const OpDef* def = OpRegistry::Global()->Find(name);
    if (def->grad_fn && name.rfind("Test", 0) != 0) {
      EXPECT_TRUE(CheckedOps().count(name)) << name << " has a gradient but no numerical check";
    }
  }
}

class MatMulGradTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(MatMulGradTest, BothOperands) {
  const auto [ta, tb] = GetParam();
  Tensor a = RandomTensor(ta ? TensorShape{4, 3} : TensorShape{3, 4}, 1);
  Tensor b = RandomTensor(tb ? TensorShape{5, 4} : TensorShape{4, 5}, 2);
  absl::Status s = CheckGradients(
      [ta = ta, tb = tb](GraphBuilder* g, const X& x) { return ops::MatMul(g, x[0], x[1], ta, tb); }, {a, b});
  EXPECT_TRUE(s.ok()) << s;
}

INSTANTIATE_TEST_SUITE_P(Transposes, MatMulGradTest, ::testing::Combine(::testing::Bool(), ::testing::Bool()));

#define EXPECT_GRADIENTS_OK(...)               \
  do {                                         \
    absl::Status s_ = CheckGradients(__VA_ARGS__); \
    EXPECT_TRUE(s_.ok()) << s_;                \
  } while (0)

TEST(GradientCheckTest, BiasAdd) {
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::BiasAdd(g, x[0], x[1]); },
                      {RandomTensor({3, 4}, 1), RandomTensor({4}, 2)});
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::BiasAdd(g, x[0], x[1]); },
                      {RandomTensor({2, 2, 3, 4}, 3), RandomTensor({4}, 4)});
}

TEST(GradientCheckTest, AddSubMulSameShape) {
  const std::vector<Tensor> in = {RandomTensor({3, 4}, 1), RandomTensor({3, 4}, 2)};
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Add(g, x[0], x[1]); }, in);
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Sub(g, x[0], x[1]); }, in);
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Mul(g, x[0], x[1]); }, in);
}

TEST(GradientCheckTest, AddSubMulScalarSecondOperand) {
  const std::vector<Tensor> in = {RandomTensor({3, 4}, 1), RandomTensor({}, 2)};
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Add(g, x[0], x[1]); }, in);
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Sub(g, x[0], x[1]); }, in);
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Mul(g, x[0], x[1]); }, in);
  // Both scalars.
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Mul(g, x[0], x[1]); },
                      {RandomTensor({}, 3), RandomTensor({}, 4)});
}

TEST(GradientCheckTest, NegAndAddN) {
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Neg(g, x[0]); }, {RandomTensor({5}, 1)});
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::AddN(g, {x[0], x[1], x[2]}); },
                      {RandomTensor({2, 3}, 1), RandomTensor({2, 3}, 2), RandomTensor({2, 3}, 3)});
}

TEST(GradientCheckTest, Activations) {
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Relu(g, x[0]); },
                      {RandomAwayFromZero({4, 6}, 1)});
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Sigmoid(g, x[0]); },
                      {RandomTensor({4, 6}, 2, -3.0f, 3.0f)});
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Tanh(g, x[0]); },
                      {RandomTensor({4, 6}, 3, -2.0f, 2.0f)});
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Softmax(g, x[0]); },
                      {RandomTensor({3, 5}, 4, -2.0f, 2.0f)});
}

TEST(GradientCheckTest, SparseSoftmaxCrossEntropyLogits) {
  EXPECT_GRADIENTS_OK(
      [](GraphBuilder* g, const X& x) { return ops::SparseSoftmaxCrossEntropyWithLogits(g, x[0], x[1]).loss; },
      {RandomTensor({4, 5}, 1, -2.0f, 2.0f), IntTensor({4}, {0, 4, 2, 2})});
}

TEST(GradientCheckTest, MeanOfCrossEntropyLikeATrainingLoss) {
  EXPECT_GRADIENTS_OK(
      [](GraphBuilder* g, const X& x) {
        return ops::Mean(g, ops::SparseSoftmaxCrossEntropyWithLogits(g, x[0], x[1]).loss);
      },
      {RandomTensor({4, 5}, 2, -2.0f, 2.0f), IntTensor({4}, {1, 3, 0, 4})});
}

TEST(GradientCheckTest, RowOps) {
  const std::vector<Tensor> in = {RandomTensor({3, 4}, 1), RandomTensor({3}, 2)};
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::ScaleRows(g, x[0], x[1]); }, in);
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::RowDot(g, x[0], x[1]); },
                      {RandomTensor({3, 4}, 3), RandomTensor({3, 4}, 4)});
}

TEST(GradientCheckTest, Reductions) {
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Sum(g, x[0]); }, {RandomTensor({3, 4}, 1)});
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Mean(g, x[0]); }, {RandomTensor({3, 4}, 2)});
}

TEST(GradientCheckTest, ArrayOps) {
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Reshape(g, x[0], {-1, 2, 3}); },
                      {RandomTensor({4, 6}, 1)});
  GradientCheckOptions first_only;
  first_only.inputs_to_check = {0};
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::ReshapeLike(g, x[0], x[1]); },
                      {RandomTensor({4, 6}, 2), RandomTensor({2, 12}, 3)}, first_only);
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Cast(g, x[0], DType::kFloat32); },
                      {RandomTensor({5}, 4)});
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return g->Op("Identity", {x[0]}); }, {RandomTensor({5}, 5)});
}

struct ConvGradCase {
  TensorShape x, f;
  int stride;
  const char* padding;
};

class ConvGradTest : public ::testing::TestWithParam<ConvGradCase> {};

TEST_P(ConvGradTest, InputAndFilter) {
  const ConvGradCase c = GetParam();
  EXPECT_GRADIENTS_OK(
      [c](GraphBuilder* g, const X& x) { return ops::Conv2D(g, x[0], x[1], c.stride, c.padding); },
      {RandomTensor(c.x, 1), RandomTensor(c.f, 2)});
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvGradTest,
                         ::testing::Values(ConvGradCase{{2, 5, 5, 2}, {3, 3, 2, 3}, 1, "VALID"},
                                           ConvGradCase{{2, 5, 6, 2}, {3, 3, 2, 3}, 2, "SAME"},
                                           ConvGradCase{{1, 6, 6, 2}, {2, 3, 2, 2}, 2, "VALID"},
                                           ConvGradCase{{2, 4, 4, 3}, {1, 1, 3, 2}, 1, "SAME"}));

struct PoolGradCase {
  TensorShape x;
  int ksize, stride;
  const char* padding;
};

class MaxPoolGradTest : public ::testing::TestWithParam<PoolGradCase> {};

TEST_P(MaxPoolGradTest, Input) {
  const PoolGradCase c = GetParam();
  EXPECT_GRADIENTS_OK(
      [c](GraphBuilder* g, const X& x) { return ops::MaxPool(g, x[0], c.ksize, c.stride, c.padding); },
      {DistinctTensor(c.x, 7)});
}

INSTANTIATE_TEST_SUITE_P(Shapes, MaxPoolGradTest,
                         ::testing::Values(PoolGradCase{{2, 4, 4, 2}, 2, 2, "VALID"},
                                           PoolGradCase{{1, 5, 5, 2}, 3, 2, "SAME"},
                                           PoolGradCase{{1, 5, 4, 3}, 2, 2, "SAME"}));

// Training-mode batch norm, through every input: x (rows of a matrix and
// NHWC positions), gamma and beta. Batch statistics make every dx depend on
// every x of its channel, which the checker sees through W.
TEST(GradientCheckTest, BatchNorm) {
  auto bn = [](GraphBuilder* g, const X& x) { return g->Op("BatchNorm", {x[0], x[1], x[2]}); };
  GradientCheckOptions options;
  options.eps = 1e-3;
  options.tolerance = 5e-3;
  EXPECT_GRADIENTS_OK(bn, {RandomTensor({6, 3}, 1), RandomTensor({3}, 2), RandomTensor({3}, 3)}, options);
  EXPECT_GRADIENTS_OK(bn, {RandomTensor({2, 3, 2, 4}, 4), RandomTensor({4}, 5), RandomTensor({4}, 6)}, options);
}

// Synchronised batch norm on one replica, where CrossReplicaSum is the
// identity: x's gradient comes both straight from BatchNormFromSums and
// back through the sums.
TEST(GradientCheckTest, SynchronizedBatchNorm) {
  auto bn = [](GraphBuilder* g, const X& x) {
    Node* sums = g->AddNode("BatchNormSums", {x[0]});
    Node* all = g->AddNode("CrossReplicaSum", {Output(sums, 0), Output(sums, 1), Output(sums, 2)});
    return g->Op("BatchNormFromSums", {x[0], x[1], x[2], Output(all, 0), Output(all, 1), Output(all, 2)});
  };
  GradientCheckOptions options;
  options.eps = 1e-3;
  options.tolerance = 5e-3;
  EXPECT_GRADIENTS_OK(bn, {RandomTensor({6, 3}, 1), RandomTensor({3}, 2), RandomTensor({3}, 3)}, options);
  EXPECT_GRADIENTS_OK(bn, {RandomTensor({2, 3, 2, 4}, 4), RandomTensor({4}, 5), RandomTensor({4}, 6)}, options);
}

// An LSTM through x, the kernels and the bias, over 3 steps, returning the
// sequence and the last step: every later h depends on every earlier x.
TEST(GradientCheckTest, Lstm) {
  GradientCheckOptions options;
  options.eps = 1e-3;
  options.tolerance = 5e-3;
  for (bool sequences : {true, false}) {
    SCOPED_TRACE(sequences ? "sequences" : "last step");
    auto lstm = [sequences](GraphBuilder* g, const X& x) {
      return g->Op("LSTM", {x[0], x[1], x[2], x[3]}, {Attr("return_sequences", sequences)});
    };
    EXPECT_GRADIENTS_OK(lstm,
                        {RandomTensor({2, 3, 4}, 1), RandomTensor({4, 8}, 2, -0.6f, 0.6f),
                         RandomTensor({2, 8}, 3, -0.6f, 0.6f), RandomTensor({8}, 4, -0.5f, 0.5f)},
                        options);
  }
}

// A GRU likewise, through both rows of its bias (the input side's and the
// recurrent side's, which the reset gate scales).
TEST(GradientCheckTest, Gru) {
  GradientCheckOptions options;
  options.eps = 1e-3;
  options.tolerance = 5e-3;
  for (bool sequences : {true, false}) {
    SCOPED_TRACE(sequences ? "sequences" : "last step");
    auto gru = [sequences](GraphBuilder* g, const X& x) {
      return g->Op("GRU", {x[0], x[1], x[2], x[3]}, {Attr("return_sequences", sequences)});
    };
    EXPECT_GRADIENTS_OK(gru,
                        {RandomTensor({2, 3, 4}, 1), RandomTensor({4, 6}, 2, -0.6f, 0.6f),
                         RandomTensor({2, 6}, 3, -0.6f, 0.6f), RandomTensor({2, 6}, 4, -0.5f, 0.5f)},
                        options);
  }
}

// Layer norm, through x (rows of a matrix and the channels of each NHWC
// position), gamma and beta. Row statistics make every dx depend on every x
// of its row.
TEST(GradientCheckTest, LayerNorm) {
  auto ln = [](GraphBuilder* g, const X& x) { return g->Op("LayerNorm", {x[0], x[1], x[2]}); };
  GradientCheckOptions options;
  options.eps = 1e-3;
  options.tolerance = 5e-3;
  EXPECT_GRADIENTS_OK(ln, {RandomTensor({4, 5}, 1), RandomTensor({5}, 2), RandomTensor({5}, 3)}, options);
  EXPECT_GRADIENTS_OK(ln, {RandomTensor({2, 3, 2, 4}, 4), RandomTensor({4}, 5), RandomTensor({4}, 6)}, options);
}

// Attention through q, k and v (one head and several, causal and not);
// every output row depends on every unmasked key and value.
TEST(GradientCheckTest, Attention) {
  GradientCheckOptions options;
  options.eps = 1e-3;
  options.tolerance = 5e-3;
  for (bool causal : {false, true}) {
    for (int64_t heads : {1, 2}) {
      SCOPED_TRACE(std::to_string(heads) + (causal ? " heads, causal" : " heads"));
      auto attn = [heads, causal](GraphBuilder* g, const X& x) {
        return g->Op("Attention", {x[0], x[1], x[2]}, {Attr("num_heads", heads), Attr("causal", causal)});
      };
      EXPECT_GRADIENTS_OK(attn, {RandomTensor({2, 4, 6}, 1), RandomTensor({2, 4, 6}, 2), RandomTensor({2, 4, 6}, 3)},
                          options);
    }
  }
}

class AvgPoolGradTest : public ::testing::TestWithParam<PoolGradCase> {};

TEST_P(AvgPoolGradTest, Input) {
  const PoolGradCase c = GetParam();
  EXPECT_GRADIENTS_OK(
      [c](GraphBuilder* g, const X& x) {
        return g->Op("AvgPool", {x[0]},
                     {Attr("ksize", int64_t{c.ksize}), Attr("stride", int64_t{c.stride}),
                      Attr("padding", std::string(c.padding))});
      },
      {RandomTensor(c.x, 8)});
}

// Uneven SAME padding (5 by 4 with 2 by 2 windows, 3 by 3 at stride 2)
// leaves edge windows with fewer in-image positions.
INSTANTIATE_TEST_SUITE_P(Shapes, AvgPoolGradTest,
                         ::testing::Values(PoolGradCase{{2, 4, 4, 2}, 2, 2, "VALID"},
                                           PoolGradCase{{1, 5, 5, 2}, 3, 2, "SAME"},
                                           PoolGradCase{{1, 5, 4, 3}, 2, 2, "SAME"},
                                           PoolGradCase{{1, 4, 4, 2}, 3, 1, "SAME"}));

// Concat along the last axis of matrices and images, two inputs and three.
TEST(GradientCheckTest, Concat) {
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return g->Op("Concat", {x[0], x[1]}); },
                      {RandomTensor({3, 2}, 1), RandomTensor({3, 4}, 2)});
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return g->Op("Concat", {x[0], x[1], x[2]}); },
                      {RandomTensor({2, 3, 2, 1}, 3), RandomTensor({2, 3, 2, 3}, 4), RandomTensor({2, 3, 2, 2}, 5)});
}

TEST(GradientCheckTest, GlobalAvgPool) {
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return g->Op("GlobalAvgPool", {x[0]}); },
                      {RandomTensor({2, 3, 4, 5}, 1)});
}

TEST(GradientCheckTest, Dropout) {
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Dropout(g, x[0], 0.4f, 3).y; },
                      {RandomTensor({4, 5}, 1)});
}

// Embedding through params, with ids that repeat (their rows' gradients
// add up) and rows no id names (zero); int32 ids, and float ids, which are
// indexes and are not perturbed.
TEST(GradientCheckTest, Embedding) {
  auto emb = [](GraphBuilder* g, const X& x) { return g->Op("Embedding", {x[0], x[1]}); };
  EXPECT_GRADIENTS_OK(emb, {RandomTensor({5, 3}, 1), IntTensor({2, 3}, {4, 0, 4, 1, 4, 0})});
  GradientCheckOptions params_only;
  params_only.inputs_to_check = {0};
  EXPECT_GRADIENTS_OK(emb, {RandomTensor({6, 2}, 2), testing::FloatTensor({4}, {5, 2, 2, 0})}, params_only);
}

TEST(GradientCheckTest, FanOutSumsEveryPath) {
  // x reaches y along three paths; AddGradients sums them with AddN.
  EXPECT_GRADIENTS_OK([](GraphBuilder* g, const X& x) { return ops::Add(g, ops::Mul(g, x[0], x[0]), ops::Tanh(g, x[0])); },
                      {RandomTensor({3, 3}, 1)});
}

TEST(GradientCheckTest, SmallMlpEndToEnd) {
  EXPECT_GRADIENTS_OK(
      [](GraphBuilder* g, const X& x) {
        Output h = ops::Relu(g, ops::BiasAdd(g, ops::MatMul(g, x[0], x[1]), x[2]));
        Output logits = ops::MatMul(g, h, x[3]);
        return ops::Mean(g, ops::SparseSoftmaxCrossEntropyWithLogits(g, logits, x[4]).loss);
      },
      {RandomTensor({4, 6}, 1), RandomTensor({6, 5}, 2), RandomTensor({5}, 3, 0.5f, 1.0f), RandomTensor({5, 3}, 4),
       IntTensor({4}, {0, 2, 1, 2})});
}

}  // namespace
}  // namespace weft
