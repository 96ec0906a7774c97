#include "runtime/testing/gradient_checker.h"

#include "gtest/gtest.h"
#include "graph/gradients.h"
#include "graph/ops/ops.h"
#include "runtime/op_kernel.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace testing {
namespace {

// y = x * x with a gradient that is off by `factor`: the checker must notice.
template <int kPercentOff>
absl::Status SkewedSquareGrad(GradContext* c) {
  GraphBuilder* b = c->builder;
  const float scale = 2.0f * (1.0f + kPercentOff / 100.0f);
  c->grad_inputs[0] = ops::Mul(b, ops::Mul(b, c->grad_outputs[0], c->inputs[0]), b->ScalarConst(scale));
  return absl::OkStatus();
}

WEFT_REGISTER_OP(OpDef{.name = "TestSquareHalfGrad",
                       .num_inputs = 1,
                       .num_outputs = 1,
                       .shape_fn = UnchangedShape,
                       .grad_fn = SkewedSquareGrad<-50>});
WEFT_REGISTER_OP(OpDef{.name = "TestSquareOnePercentOffGrad",
                       .num_inputs = 1,
                       .num_outputs = 1,
                       .shape_fn = UnchangedShape,
                       .grad_fn = SkewedSquareGrad<1>});

class SquareOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* y = ctx->allocate_output(0, DType::kFloat32, x.shape());
    for (int64_t i = 0; i < x.NumElements(); ++i) y->data<float>()[i] = x.data<float>()[i] * x.data<float>()[i];
  }
};
WEFT_REGISTER_KERNEL("TestSquareHalfGrad", "CPU", SquareOp);
WEFT_REGISTER_KERNEL("TestSquareOnePercentOffGrad", "CPU", SquareOp);

TEST(GradientCheckerTest, AcceptsACorrectGradient) {
  auto r = ComputeGradientError([](GraphBuilder* b, const std::vector<Output>& x) { return ops::Mul(b, x[0], x[0]); },
                                {RandomTensor({3, 4}, 1)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->elements_checked, 12);
  EXPECT_LT(r->max_error, 1e-3);
}

TEST(GradientCheckerTest, RejectsAWrongGradient) {
  absl::Status s = CheckGradients(
      [](GraphBuilder* b, const std::vector<Output>& x) { return b->Op("TestSquareHalfGrad", {x[0]}); },
      {RandomTensor({3, 4}, 2)});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("input 0 [3,4] element"), std::string::npos) << s;
}

TEST(GradientCheckerTest, DetectsAOnePercentError) {
  // Values in [1, 2]: the gradient 2x is >= 2, so 1% is above the tolerance.
  absl::Status s = CheckGradients(
      [](GraphBuilder* b, const std::vector<Output>& x) { return b->Op("TestSquareOnePercentOffGrad", {x[0]}); },
      {RandomTensor({5}, 3, 1.0f, 2.0f)}, GradientCheckOptions{.seed = 5});
  EXPECT_FALSE(s.ok());
}

TEST(GradientCheckerTest, ChecksOnlyTheRequestedInputs) {
  GradientCheckOptions opts;
  opts.inputs_to_check = {1};
  auto r = ComputeGradientError(
      [](GraphBuilder* b, const std::vector<Output>& x) { return ops::Mul(b, x[0], x[1]); },
      {RandomTensor({2, 3}, 4), RandomTensor({2, 3}, 5)}, opts);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->elements_checked, 6);
}

TEST(GradientCheckerTest, ReportsBuildErrors) {
  auto r = ComputeGradientError(
      [](GraphBuilder* b, const std::vector<Output>& x) { return ops::MatMul(b, x[0], x[0]); },
      {RandomTensor({2, 3}, 4)});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace testing
}  // namespace weft
