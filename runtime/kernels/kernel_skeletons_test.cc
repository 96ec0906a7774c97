// The shared kernel skeletons' contract with a device's computation: Impl
// runs only once the checks passed and the output is allocated with the
// op's shape, it runs once per Compute, and a bad input fails with the
// op's error before Impl sees it. A counting Impl stands in for a device.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "graph/builder.h"
#include "graph/graph.h"
#include "graph/ops/ops.h"
#include "gtest/gtest.h"
#include "runtime/device.h"
#include "runtime/kernels/math_kernels.h"
#include "runtime/kernels/training_kernels.h"
#include "runtime/op_kernel.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace {

using testing::FloatTensor;

int bias_add_runs = 0;
struct CountingBiasAdd {
  static void Run(OpKernelContext*, const Tensor&, const Tensor&, Tensor* out) {
    ++bias_add_runs;
    EXPECT_TRUE(out->IsInitialized());
  }
};

int matmul_runs = 0;
kernels::MatMulDims last_dims;
struct CountingMatMul {
  static void Run(OpKernelContext*, const Tensor&, const Tensor&, const kernels::MatMulDims& d, Tensor*) {
    ++matmul_runs;
    last_dims = d;
  }
};

int apply_runs = 0;
struct CountingGradientDescent {
  explicit CountingGradientDescent(OpKernelConstruction*) {}
  void Run(OpKernelContext*, const kernels::GradientDescentParams& p) {
    ++apply_runs;
    EXPECT_FLOAT_EQ(p.schedule.learning_rate, 0.5f);
  }
};

// Runs `kernel` of `node` on the CPU with `inputs`; the outputs land in *outputs.
absl::Status RunKernel(OpKernel* kernel, const Node* node, CpuDevice* device, const std::vector<Tensor>& inputs,
                       std::vector<Tensor>* outputs) {
  std::vector<const Tensor*> in;
  for (const Tensor& t : inputs) in.push_back(&t);
  outputs->assign(node->num_outputs(), Tensor());
  OpKernelContext::Params p;
  p.node = node;
  p.device = device;
  p.inputs = absl::MakeConstSpan(in);
  p.outputs = absl::MakeSpan(*outputs);
  OpKernelContext ctx(p);
  kernel->Compute(&ctx);
  return ctx.status();
}

class KernelSkeletonsTest : public ::testing::Test {
 protected:
  KernelSkeletonsTest() : b_(&graph_), device_("/device:CPU:0", 1) {}

  Graph graph_;
  GraphBuilder b_;
  CpuDevice device_;
};

TEST_F(KernelSkeletonsTest, BiasAddRunsTheDeviceOnceWithTheOutputAllocated) {
  Output x = b_.Placeholder(DType::kFloat32, TensorShape{2, 3}, "x");
  Output bias = b_.Placeholder(DType::kFloat32, TensorShape{3}, "bias");
  Output y = ops::BiasAdd(&b_, x, bias, "y");
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  OpKernelConstruction c(y.node, &device_);
  kernels::BiasAddKernel<CountingBiasAdd> kernel(&c);
  ASSERT_TRUE(c.status().ok()) << c.status();

  bias_add_runs = 0;
  std::vector<Tensor> out;
  ASSERT_TRUE(
      RunKernel(&kernel, y.node, &device_, {FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6}), FloatTensor({3}, {1, 1, 1})}, &out)
          .ok());
  EXPECT_EQ(bias_add_runs, 1);
  EXPECT_EQ(out[0].shape(), (TensorShape{2, 3}));

  // A bias that does not match x's last dimension: the op's error, and the
  // device never runs.
  absl::Status s =
      RunKernel(&kernel, y.node, &device_, {FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6}), FloatTensor({2}, {1, 1})}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("bias"), std::string::npos) << s;
  EXPECT_EQ(bias_add_runs, 1);
  EXPECT_FALSE(out[0].IsInitialized());
}

TEST_F(KernelSkeletonsTest, MatMulHandsTheDeviceItsDimensionsAndSkipsEmptyOutputs) {
  Output a = b_.Placeholder(DType::kFloat32, TensorShape{-1, 3}, "a");
  Output w = b_.Placeholder(DType::kFloat32, TensorShape{4, 3}, "w");
  Output y = ops::MatMul(&b_, a, w, /*transpose_a=*/false, /*transpose_b=*/true, "y");
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  OpKernelConstruction c(y.node, &device_);
  kernels::MatMulKernel<CountingMatMul> kernel(&c);
  ASSERT_TRUE(c.status().ok()) << c.status();

  matmul_runs = 0;
  std::vector<Tensor> out;
  ASSERT_TRUE(
      RunKernel(&kernel, y.node, &device_, {Tensor(DType::kFloat32, {2, 3}), Tensor(DType::kFloat32, {4, 3})}, &out)
          .ok());
  EXPECT_EQ(matmul_runs, 1);
  EXPECT_TRUE(last_dims.tb);
  EXPECT_EQ(last_dims.m, 2);
  EXPECT_EQ(last_dims.n, 4);
  EXPECT_EQ(last_dims.k, 3);
  EXPECT_EQ(out[0].shape(), (TensorShape{2, 4}));

  // No rows: the output is allocated empty and there is nothing to compute.
  ASSERT_TRUE(
      RunKernel(&kernel, y.node, &device_, {Tensor(DType::kFloat32, {0, 3}), Tensor(DType::kFloat32, {4, 3})}, &out)
          .ok());
  EXPECT_EQ(out[0].shape(), (TensorShape{0, 4}));
  EXPECT_EQ(matmul_runs, 1);

  absl::Status s =
      RunKernel(&kernel, y.node, &device_, {Tensor(DType::kFloat32, {2, 5}), Tensor(DType::kFloat32, {4, 3})}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("inner dimensions differ"), std::string::npos) << s;
  EXPECT_EQ(matmul_runs, 1);
}

TEST_F(KernelSkeletonsTest, ApplyReadsItsAttributesOnceAndForwardsTheVariable) {
  Output var = b_.Placeholder(DType::kFloat32, TensorShape{3}, "var");
  Output grad = b_.Placeholder(DType::kFloat32, TensorShape{3}, "grad");
  Output y = ops::ApplyGradientDescent(&b_, var, grad, 0.5f, "apply");
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  OpKernelConstruction c(y.node, &device_);
  kernels::ApplyKernel<kernels::GradientDescentOp, CountingGradientDescent> kernel(&c);
  ASSERT_TRUE(c.status().ok()) << c.status();

  apply_runs = 0;
  const Tensor v = FloatTensor({3}, {1, 2, 3});
  std::vector<Tensor> out;
  ASSERT_TRUE(RunKernel(&kernel, y.node, &device_, {v, FloatTensor({3}, {0, 0, 0})}, &out).ok());
  EXPECT_EQ(apply_runs, 1);
  EXPECT_EQ(out[0].raw_data(), v.raw_data());  // the variable itself, not a copy

  absl::Status s = RunKernel(&kernel, y.node, &device_, {v, FloatTensor({2}, {0, 0})}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("grad"), std::string::npos) << s;
  EXPECT_EQ(apply_runs, 1);
  EXPECT_FALSE(out[0].IsInitialized());
}

}  // namespace
}  // namespace weft
