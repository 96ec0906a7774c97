// The window ops' kernels (Conv2D with its two backprops, MaxPool and
// MaxPoolGrad: graph/ops/nn_ops.cc), written once for every device as in
// math_kernels.h: each class template reads the op's ConvParams or
// PoolParams at construction, computes and checks the geometry
// (window_checks.h), allocates the output and, when it is not empty, hands
// the geometry and operands to `Impl::Run`, the device's computation
// (cpu/conv_kernels.cc, cpu/pool_kernels.cc, cuda/gpu_matmul_conv_kernels.cc).
//
// Thread-safety: kernels are immutable after construction; Compute may run
// concurrently.
#ifndef WEFT_RUNTIME_KERNELS_WINDOW_KERNELS_H_
#define WEFT_RUNTIME_KERNELS_WINDOW_KERNELS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/tensor.h"
#include "graph/ops/window_geometry.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/kernels/window_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace kernels {

// Which of a convolution's three ops a kernel computes: its inputs are
// (x, filter) forward, (x, filter, dy) for both backprops, and its output
// has y's, x's or the filter's shape.
enum class ConvOp { kForward, kBackpropInput, kBackpropFilter };

// Impl::Run(ctx, geometry, out) with out the non-empty output; the
// operands are ctx's inputs.
template <ConvOp kOp, typename Impl>
class ConvKernel : public OpKernel {
 public:
  explicit ConvKernel(OpKernelConstruction* c) : OpKernel(c) { GetAttr(c, GetConvParams(c->def()), &params_); }

  void Compute(OpKernelContext* ctx) override {
    auto geo = ComputeConvGeometry(ctx->input(0), ctx->input(1), params_);
    OP_REQUIRES_OK(ctx, geo.status());
    const ConvGeometry& g = *geo;
    if (kOp != ConvOp::kForward) {
      OP_REQUIRES_OK(ctx, CheckConvGradient(g, ctx->input(2)));
    }
    const TensorShape shape = kOp == ConvOp::kForward         ? g.OutputShape()
                              : kOp == ConvOp::kBackpropInput ? ctx->input(0).shape()
                                                              : ctx->input(1).shape();
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, shape);
    if (out == nullptr || out->NumElements() == 0) return;
    Impl::Run(ctx, g, out);
  }

 private:
  ConvParams params_;
};

// MaxPool. Impl::Run(ctx, geometry, x, out) with out non-empty.
template <typename Impl>
class MaxPoolKernel : public OpKernel {
 public:
  explicit MaxPoolKernel(OpKernelConstruction* c) : OpKernel(c) { GetAttr(c, GetPoolParams(c->def()), &params_); }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    auto geo = ComputePoolGeometry(x, params_);
    OP_REQUIRES_OK(ctx, geo.status());
    const PoolGeometry& g = *geo;
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, g.OutputShape());
    if (out == nullptr || out->NumElements() == 0) return;
    Impl::Run(ctx, g, x, out);
  }

 private:
  PoolParams params_;
};

// MaxPoolGrad of (x, y, dy): y is only checked for its shape (each device
// recomputes the maxima from x). Impl::Run(ctx, geometry, x, dy, out) with
// out (dx) non-empty.
template <typename Impl>
class MaxPoolGradKernel : public OpKernel {
 public:
  explicit MaxPoolGradKernel(OpKernelConstruction* c) : OpKernel(c) { GetAttr(c, GetPoolParams(c->def()), &params_); }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& grad = ctx->input(2);
    auto geo = ComputePoolGeometry(x, params_);
    OP_REQUIRES_OK(ctx, geo.status());
    const PoolGeometry& g = *geo;
    OP_REQUIRES_OK(ctx, CheckPoolGradInputs(g, ctx->input(1), grad));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr || out->NumElements() == 0) return;
    Impl::Run(ctx, g, x, grad, out);
  }

 private:
  PoolParams params_;
};

// AvgPool's forward kernel is MaxPoolKernel with an averaging Impl (the
// same attributes, geometry and output). AvgPoolGrad of (x, dy): x is read
// only for its shape. Impl::Run(ctx, geometry, dy, out) with out (dx)
// non-empty.
template <typename Impl>
class AvgPoolGradKernel : public OpKernel {
 public:
  explicit AvgPoolGradKernel(OpKernelConstruction* c) : OpKernel(c) { GetAttr(c, GetPoolParams(c->def()), &params_); }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& grad = ctx->input(1);
    auto geo = ComputePoolGeometry(x, params_);
    OP_REQUIRES_OK(ctx, geo.status());
    const PoolGeometry& g = *geo;
    OP_REQUIRES(ctx, grad.shape() == g.OutputShape(),
                absl::InvalidArgumentError(absl::StrCat("gradient ", grad.shape().DebugString(),
                                                        " does not match the pooling output ",
                                                        g.OutputShape().DebugString())));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr || out->NumElements() == 0) return;
    Impl::Run(ctx, g, grad, out);
  }

 private:
  PoolParams params_;
};

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_WINDOW_KERNELS_H_
