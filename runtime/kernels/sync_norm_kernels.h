// The kernels of synchronised batch norm (graph/ops/sync_norm_ops.cc),
// written once for every device as norm_kernels.h: each class template
// checks its op's inputs, allocates the outputs and hands the operands to
// `Impl::Run` (cpu/sync_norm_kernels.cc, cuda/gpu_sync_norm_kernels.cc).
//
// `count`, the rows of the global batch, is a float32 scalar that lives on
// the op's device; the CPU refuses one below 1 by name, a GPU (which
// cannot read it without waiting) gives NaN statistics for it.
//
// Thread-safety: kernels are immutable after construction; Compute may run
// concurrently.
#ifndef WEFT_RUNTIME_KERNELS_SYNC_NORM_KERNELS_H_
#define WEFT_RUNTIME_KERNELS_SYNC_NORM_KERNELS_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/tensor.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/kernels/norm_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace kernels {

inline absl::Status CheckCount(const Tensor& count) {
  if (absl::Status s = ExpectDType(count, DType::kFloat32, "count"); !s.ok()) return s;
  if (count.shape().rank() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("count must be a scalar, got shape ", count.shape().DebugString()));
  }
  return absl::OkStatus();
}

// BatchNormSums(x) -> (sum, sum_squares, count).
// Impl::Run(ctx, geometry, x, sum, sum_squares, count).
template <typename Impl>
class BatchNormSumsKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<NormGeometry> g = CheckNormInputs(ctx, 0, {});
    OP_REQUIRES_OK(ctx, g.status());
    const TensorShape c{g->channels};
    Tensor* sum = ctx->allocate_output(0, DType::kFloat32, c);
    Tensor* sum_sq = sum == nullptr ? nullptr : ctx->allocate_output(1, DType::kFloat32, c);
    Tensor* count = sum_sq == nullptr ? nullptr : ctx->allocate_output(2, DType::kFloat32, TensorShape{});
    if (count == nullptr) return;
    Impl::Run(ctx, *g, ctx->input(0), sum, sum_sq, count);
  }
};

// BatchNormSumsGrad(x, g_sum, g_sum_squares) -> dx.
// Impl::Run(ctx, geometry, x, g_sum, g_sum_squares, dx).
template <typename Impl>
class BatchNormSumsGradKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<NormGeometry> g = CheckNormInputs(ctx, 0, {{1, "g_sum"}, {2, "g_sum_squares"}});
    OP_REQUIRES_OK(ctx, g.status());
    Tensor* dx = ctx->allocate_output(0, DType::kFloat32, ctx->input(0).shape());
    if (dx == nullptr) return;
    Impl::Run(ctx, *g, ctx->input(0), ctx->input(1), ctx->input(2), dx);
  }
};

// BatchNormFromSums(x, gamma, beta, sum, sum_squares, count)
//     -> (y, mean, variance, inv_std).
// Impl::Run(ctx, geometry, x, gamma, beta, sum, sum_squares, count, epsilon,
//           y, mean, variance, inv_std).
template <typename Impl>
class BatchNormFromSumsKernel : public OpKernel {
 public:
  explicit BatchNormFromSumsKernel(OpKernelConstruction* c) : OpKernel(c) {
    GetAttr(c, ReadEpsilon(c->def()), &epsilon_);
  }
  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<NormGeometry> g =
        CheckNormInputs(ctx, 0, {{1, "gamma"}, {2, "beta"}, {3, "sum"}, {4, "sum_squares"}});
    OP_REQUIRES_OK(ctx, g.status());
    OP_REQUIRES_OK(ctx, CheckCount(ctx->input(5)));
    const Tensor& x = ctx->input(0);
    const TensorShape c{g->channels};
    Tensor* y = ctx->allocate_output(0, DType::kFloat32, x.shape());
    Tensor* mean = y == nullptr ? nullptr : ctx->allocate_output(1, DType::kFloat32, c);
    Tensor* var = mean == nullptr ? nullptr : ctx->allocate_output(2, DType::kFloat32, c);
    Tensor* inv_std = var == nullptr ? nullptr : ctx->allocate_output(3, DType::kFloat32, c);
    if (inv_std == nullptr) return;
    Impl::Run(ctx, *g, x, ctx->input(1), ctx->input(2), ctx->input(3), ctx->input(4), ctx->input(5), epsilon_, y,
              mean, var, inv_std);
  }

 private:
  float epsilon_ = 1e-3f;
};

// BatchNormFromSumsGrad(dy, x, gamma, mean, inv_std, count)
//     -> (dx, dgamma, dbeta, dsum, dsum_squares).
// Impl::Run(ctx, geometry, dy, x, gamma, mean, inv_std, count, outs) with
// outs = {dx, dgamma, dbeta, dsum, dsum_squares}.
template <typename Impl>
class BatchNormFromSumsGradKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<NormGeometry> g = CheckNormInputs(ctx, 1, {{2, "gamma"}, {3, "mean"}, {4, "inv_std"}});
    OP_REQUIRES_OK(ctx, g.status());
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    OP_REQUIRES_OK(ctx, ExpectDType(dy, DType::kFloat32, "dy"));
    OP_REQUIRES_OK(ctx, ExpectSameShape(dy, x, "dy", "x"));
    OP_REQUIRES_OK(ctx, CheckCount(ctx->input(5)));
    Tensor* outs[5] = {};
    for (int i = 0; i < 5; ++i) {
      outs[i] = ctx->allocate_output(i, DType::kFloat32, i == 0 ? x.shape() : TensorShape{g->channels});
      if (outs[i] == nullptr) return;
    }
    Impl::Run(ctx, *g, dy, x, ctx->input(2), ctx->input(3), ctx->input(4), ctx->input(5), outs);
  }
};

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_SYNC_NORM_KERNELS_H_
