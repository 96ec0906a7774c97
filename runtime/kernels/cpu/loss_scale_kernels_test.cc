// Mixed precision's kernels on the CPU: MatMul's rounded operands, the
// unscaling that marks an overflowing step, the updates that skip it, and
// the loss scale's own update.
#include <cmath>
#include <limits>

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

const float kInf = std::numeric_limits<float>::infinity();

// Feeds "x0", "x1", ... with `inputs` and fetches `outs` on `device`.
std::vector<Tensor> Run(const Graph& g, Device* device, const std::vector<Tensor>& inputs,
                        const std::vector<Output>& outs) {
  std::vector<std::pair<std::string, Tensor>> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) feeds.emplace_back("x" + std::to_string(i), inputs[i]);
  std::vector<std::string> fetches;
  for (const Output& o : outs) fetches.push_back(o.name());
  auto r = RunGraphOnce(g, device, feeds, fetches);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::vector<Tensor>();
}

// a [1, 2] x b [2, 1] with compute_type `type`.
float Product(const char* type, float a0, float a1, float b0, float b1) {
  Graph g;
  GraphBuilder b(&g);
  Output y = b.Op("MatMul",
                  {b.Placeholder(DType::kFloat32, {1, 2}, "x0"), b.Placeholder(DType::kFloat32, {2, 1}, "x1")},
                  {Attr("compute_type", type)});
  EXPECT_TRUE(b.status().ok()) << b.status();
  CpuDevice cpu("/device:CPU:0", 1);
  auto out = Run(g, &cpu, {FloatTensor({1, 2}, {a0, a1}), FloatTensor({2, 1}, {b0, b1})}, {y});
  return out.empty() ? NAN : out[0].data<float>()[0];
}

TEST(MixedMatMulTest, OperandsAreRoundedAndTheSumStaysFloat32) {
  const float tiny = std::ldexp(1.0f, -12);  // below float16's half ulp of 1
  EXPECT_EQ(Product("float32", 1.0f + tiny, 0.0f, 1.0f, 0.0f), 1.0f + tiny);
  EXPECT_EQ(Product("float16", 1.0f + tiny, 0.0f, 1.0f, 0.0f), 1.0f);
  // 1 + 2^-10 is a float16 but not a bfloat16 (7 mantissa bits).
  const float f16 = 1.0f + std::ldexp(1.0f, -10);
  EXPECT_EQ(Product("float16", f16, 0.0f, 1.0f, 0.0f), f16);
  EXPECT_EQ(Product("bfloat16", f16, 0.0f, 1.0f, 0.0f), 1.0f);
  // Float16 overflows past 65504; bfloat16 has float32's range.
  EXPECT_TRUE(std::isinf(Product("float16", 70000.0f, 0.0f, 1.0f, 0.0f)));
  EXPECT_NEAR(Product("bfloat16", 70000.0f, 0.0f, 1.0f, 0.0f), 70000.0f, 256.0f);
  // The products accumulate in float32: 2048 + 1 is exact there, not in float16.
  EXPECT_EQ(Product("float16", 2048.0f, 1.0f, 1.0f, 1.0f), 2049.0f);
}

TEST(MixedMatMulTest, AnUnknownComputeTypeIsRefusedByName) {
  Graph g;
  GraphBuilder b(&g);
  b.Op("MatMul", {b.Placeholder(DType::kFloat32, {1, 2}, "x0"), b.Placeholder(DType::kFloat32, {2, 1}, "x1")},
       {Attr("compute_type", "float8")}, "mm");
  ASSERT_FALSE(b.status().ok());
  EXPECT_TRUE(testing::StatusHas(b.status(), "mm")) << b.status();
  EXPECT_TRUE(testing::StatusHas(b.status(), "compute_type must be float32, float16 or bfloat16, got 'float8'"))
      << b.status();
}

// UnscaleGradients(scale = 4, g0 [2, 3], g1 [5]).
std::vector<Tensor> Unscale(const Tensor& g0, const Tensor& g1) {
  Graph g;
  GraphBuilder b(&g);
  Node* n = b.AddNode("UnscaleGradients",
                      {b.Placeholder(DType::kFloat32, {}, "x0"), b.Placeholder(DType::kFloat32, {2, 3}, "x1"),
                       b.Placeholder(DType::kFloat32, {5}, "x2")});
  EXPECT_TRUE(b.status().ok()) << b.status();
  if (n == nullptr) return {};
  CpuDevice cpu("/device:CPU:0", 2);
  return Run(g, &cpu, {FloatTensor({}, {4.0f}), g0, g1}, {Output(n, 0), Output(n, 1), Output(n, 2)});
}

TEST(UnscaleGradientsTest, DividesByTheScaleWhenEverythingIsFinite) {
  Tensor g0 = RandomTensor({2, 3}, 1), g1 = RandomTensor({5}, 2);
  auto out = Unscale(g0, g1);
  ASSERT_EQ(out.size(), 3u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out[0].data<float>()[i], g0.data<float>()[i] / 4.0f);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out[1].data<float>()[i], g1.data<float>()[i] / 4.0f);
  EXPECT_EQ(out[2].data<float>()[0], 0.0f);
}

TEST(UnscaleGradientsTest, AnOverflowAnywhereMarksEveryGradient) {
  Tensor g0 = RandomTensor({2, 3}, 1), g1 = RandomTensor({5}, 2);
  g1.data<float>()[3] = kInf;  // not element 0, and not in g0
  auto out = Unscale(g0, g1);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(std::isnan(out[0].data<float>()[0]));
  EXPECT_TRUE(std::isnan(out[1].data<float>()[0]));
  EXPECT_TRUE(std::isnan(out[2].data<float>()[0]));
  EXPECT_EQ(out[0].data<float>()[1], g0.data<float>()[1] / 4.0f);  // the rest is still unscaled
}

// Runs ApplyAdam with skip_nonfinite, then ApplyLossScale, once per
// gradient, on the CPU's variables.
class SkipTest : public ::testing::Test {
 protected:
  SkipTest() : cpu_("/device:CPU:0", 1), b_(&graph_) {}

  Output Var(const std::string& name, const Tensor& value) {
    cpu_.resources()->SetVariable(name, value.DeepCopy());
    return b_.Variable(name, DType::kFloat32, value.shape(), "zeros");
  }
  Tensor Value(const std::string& name) { return *cpu_.resources()->LookupVariable(name); }

  void Step(Node* target, const Tensor& grad, const Tensor& overflow) {
    ExecutorOptions opts;
    opts.feeds = {"grad", "overflow"};
    opts.targets = {target->name()};
    auto exec = Executor::Create(&graph_, &cpu_, opts);
    ASSERT_TRUE(exec.ok()) << exec.status();
    std::vector<Tensor> out;
    absl::Status s = (*exec)->Run({grad, overflow}, &out, step_++);
    ASSERT_TRUE(s.ok()) << s;
  }

  CpuDevice cpu_;
  Graph graph_;
  GraphBuilder b_;
  int64_t step_ = 0;
};

TEST_F(SkipTest, AnOverflowingStepChangesNoWeightNoSlotAndHalvesTheScale) {
  const TensorShape shape{2, 3};
  Tensor w0 = RandomTensor(shape, 3);
  Tensor zeros = FloatTensor(shape, {0, 0, 0, 0, 0, 0});
  Output grad = b_.Placeholder(DType::kFloat32, shape, "grad");
  Node* adam = b_.AddNode("ApplyAdam",
                          {Var("w", w0), Var("m", zeros), Var("v", zeros), Var("t", FloatTensor({}, {0})), grad},
                          {Attr("learning_rate", 0.01f), Attr("beta1", 0.9f), Attr("beta2", 0.999f),
                           Attr("epsilon", 1e-7f), Attr("skip_nonfinite", true)});
  Node* scale = b_.AddNode("ApplyLossScale",
                           {Var("scale", FloatTensor({}, {4.0f})), Var("good", FloatTensor({}, {0.0f})),
                            b_.Placeholder(DType::kFloat32, {}, "overflow")},
                           {Attr("growth_interval", 2)});
  Node* both = b_.AddNode("NoOp", {}, {}, "both", {adam, scale});
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor marked = RandomTensor(shape, 4);
  marked.data<float>()[0] = nan;

  Step(both, marked, FloatTensor({}, {nan}));
  EXPECT_EQ(testing::MaxAbsDiff(Value("w"), w0), 0.0);
  EXPECT_EQ(testing::MaxAbsDiff(Value("m"), zeros), 0.0);
  EXPECT_EQ(Value("t").data<float>()[0], 0.0f);
  EXPECT_EQ(Value("scale").data<float>()[0], 2.0f);

  Step(both, RandomTensor(shape, 5), FloatTensor({}, {0.0f}));
  EXPECT_GT(testing::MaxAbsDiff(Value("w"), w0), 0.005);
  EXPECT_EQ(Value("t").data<float>()[0], 1.0f);
  EXPECT_EQ(Value("scale").data<float>()[0], 2.0f);
  EXPECT_EQ(Value("good").data<float>()[0], 1.0f);

  Step(both, RandomTensor(shape, 6), FloatTensor({}, {0.0f}));  // the second good step in a row
  EXPECT_EQ(Value("scale").data<float>()[0], 4.0f);
  EXPECT_EQ(Value("good").data<float>()[0], 0.0f);

  for (int i = 0; i < 4; ++i) Step(both, marked, FloatTensor({}, {nan}));
  EXPECT_EQ(Value("scale").data<float>()[0], 1.0f);  // never below 1
  EXPECT_EQ(Value("t").data<float>()[0], 2.0f);
}

TEST_F(SkipTest, WithoutTheAttributeANonFiniteGradientIsApplied) {
  const TensorShape shape{2, 3};
  Output grad = b_.Placeholder(DType::kFloat32, shape, "grad");
  b_.Placeholder(DType::kFloat32, {}, "overflow");
  Node* sgd = b_.AddNode("ApplyGradientDescent", {Var("w", RandomTensor(shape, 3)), grad},
                         {Attr("learning_rate", 0.1f)});
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  Tensor marked = RandomTensor(shape, 4);
  marked.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  Step(sgd, marked, FloatTensor({}, {0.0f}));
  EXPECT_TRUE(std::isnan(Value("w").data<float>()[0]));
}

TEST(LossScaleShapeTest, BadOperandsAreRefusedByRole) {
  Graph g;
  GraphBuilder b(&g);
  Output s = b.Placeholder(DType::kFloat32, {}, "s");
  b.AddNode("ApplyLossScale", {s, s, b.Placeholder(DType::kFloat32, {2}, "o")}, {Attr("growth_interval", 10)}, "u");
  EXPECT_TRUE(testing::StatusHas(b.status(), "overflow")) << b.status();
  Graph g2;
  GraphBuilder b2(&g2);
  Output s2 = b2.Placeholder(DType::kFloat32, {}, "s");
  b2.AddNode("ApplyLossScale", {s2, s2, s2}, {Attr("growth_interval", 0)}, "u");
  EXPECT_TRUE(testing::StatusHas(b2.status(), "growth_interval must be positive")) << b2.status();
  Graph g3;
  GraphBuilder b3(&g3);
  b3.AddNode("UnscaleGradients", {b3.Placeholder(DType::kFloat32, {2}, "s")}, {}, "un");
  EXPECT_TRUE(testing::StatusHas(b3.status(), "at least one gradient")) << b3.status();
}

}  // namespace
}  // namespace weft
