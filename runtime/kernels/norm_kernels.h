// The normalisation and global pooling kernels (graph/ops/norm_ops.cc),
// written once for every device as in math_kernels.h: each class template
// reads its op's inputs and epsilon, runs the checks, allocates the outputs
// and hands the operands to `Impl::Run`, the device's computation
// (cpu/norm_kernels.cc, cuda/gpu_norm_kernels.cc).
//
// x is viewed as `rows` rows of `channels` (its last axis); every statistic
// is per channel, over the rows. A batch of no rows has no statistics, so
// BatchNorm refuses it.
//
// Thread-safety: kernels are immutable after construction; Compute may run
// concurrently.
#ifndef WEFT_RUNTIME_KERNELS_NORM_KERNELS_H_
#define WEFT_RUNTIME_KERNELS_NORM_KERNELS_H_

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/tensor.h"
#include "graph/attr.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace kernels {

// x's view as rows of channels.
struct NormGeometry {
  int64_t rows = 0;
  int64_t channels = 0;
};

// x (float32, rank >= 2) and its channel vectors, each (input, role) float32
// [channels].
inline absl::StatusOr<NormGeometry> CheckNormInputs(OpKernelContext* ctx, int x_input,
                                                    std::initializer_list<std::pair<int, const char*>> vectors) {
  const Tensor& x = ctx->input(x_input);
  if (absl::Status s = ExpectDType(x, DType::kFloat32, "x"); !s.ok()) return s;
  if (x.shape().rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("x must have rank >= 2 (batch, ..., channels), got shape ", x.shape().DebugString()));
  }
  NormGeometry g;
  g.channels = x.shape().dim(x.shape().rank() - 1);
  g.rows = g.channels == 0 ? 0 : x.NumElements() / g.channels;
  for (const auto& [i, role] : vectors) {
    const Tensor& v = ctx->input(i);
    if (absl::Status s = ExpectDType(v, DType::kFloat32, role); !s.ok()) return s;
    if (v.shape().rank() != 1 || v.shape().dim(0) != g.channels) {
      return absl::InvalidArgumentError(absl::StrCat(role, " ", v.shape().DebugString(), " needs one entry per channel of x ",
                                                     x.shape().DebugString()));
    }
  }
  return g;
}

inline absl::StatusOr<float> ReadEpsilon(const NodeDef& def) {
  absl::StatusOr<float> eps = GetFloatAttrOr(def, "epsilon", 1e-3f);
  if (eps.ok() && !(*eps > 0.0f && std::isfinite(*eps))) {
    return absl::InvalidArgumentError(absl::StrCat("epsilon must be positive, got ", *eps));
  }
  return eps;
}

// BatchNorm(x, gamma, beta) -> (y, mean, variance, inv_std).
// Impl::Run(ctx, geometry, x, gamma, beta, epsilon, y, mean, variance, inv_std)
// with geometry.rows >= 1.
template <typename Impl>
class BatchNormKernel : public OpKernel {
 public:
  explicit BatchNormKernel(OpKernelConstruction* c) : OpKernel(c) { GetAttr(c, ReadEpsilon(c->def()), &epsilon_); }
  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<NormGeometry> g = CheckNormInputs(ctx, 0, {{1, "gamma"}, {2, "beta"}});
    OP_REQUIRES_OK(ctx, g.status());
    const Tensor& x = ctx->input(0);
    if (g->rows == 0) {
      OP_REQUIRES_OK(ctx, absl::InvalidArgumentError(absl::StrCat(
                              "x ", x.shape().DebugString(), " has no rows: batch statistics need at least one")));
    }
    const TensorShape c{g->channels};
    Tensor* y = ctx->allocate_output(0, DType::kFloat32, x.shape());
    Tensor* mean = y == nullptr ? nullptr : ctx->allocate_output(1, DType::kFloat32, c);
    Tensor* var = mean == nullptr ? nullptr : ctx->allocate_output(2, DType::kFloat32, c);
    Tensor* inv_std = var == nullptr ? nullptr : ctx->allocate_output(3, DType::kFloat32, c);
    if (inv_std == nullptr) return;
    Impl::Run(ctx, *g, x, ctx->input(1), ctx->input(2), epsilon_, y, mean, var, inv_std);
  }

 private:
  float epsilon_ = 1e-3f;
};

// BatchNormGrad(dy, x, gamma, mean, inv_std) -> (dx, dgamma, dbeta).
// Impl::Run(ctx, geometry, dy, x, gamma, mean, inv_std, dx, dgamma, dbeta).
template <typename Impl>
class BatchNormGradKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<NormGeometry> g = CheckNormInputs(ctx, 1, {{2, "gamma"}, {3, "mean"}, {4, "inv_std"}});
    OP_REQUIRES_OK(ctx, g.status());
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    OP_REQUIRES_OK(ctx, ExpectDType(dy, DType::kFloat32, "dy"));
    OP_REQUIRES_OK(ctx, ExpectSameShape(dy, x, "dy", "x"));
    const TensorShape c{g->channels};
    Tensor* dx = ctx->allocate_output(0, DType::kFloat32, x.shape());
    Tensor* dgamma = dx == nullptr ? nullptr : ctx->allocate_output(1, DType::kFloat32, c);
    Tensor* dbeta = dgamma == nullptr ? nullptr : ctx->allocate_output(2, DType::kFloat32, c);
    if (dbeta == nullptr) return;
    Impl::Run(ctx, *g, dy, x, ctx->input(2), ctx->input(3), ctx->input(4), dx, dgamma, dbeta);
  }
};

// BatchNormInference(x, gamma, beta, mean, variance) -> y.
// Impl::Run(ctx, geometry, x, gamma, beta, mean, variance, epsilon, y).
template <typename Impl>
class BatchNormInferenceKernel : public OpKernel {
 public:
  explicit BatchNormInferenceKernel(OpKernelConstruction* c) : OpKernel(c) {
    GetAttr(c, ReadEpsilon(c->def()), &epsilon_);
  }
  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<NormGeometry> g =
        CheckNormInputs(ctx, 0, {{1, "gamma"}, {2, "beta"}, {3, "mean"}, {4, "variance"}});
    OP_REQUIRES_OK(ctx, g.status());
    const Tensor& x = ctx->input(0);
    Tensor* y = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (y == nullptr) return;
    Impl::Run(ctx, *g, x, ctx->input(1), ctx->input(2), ctx->input(3), ctx->input(4), epsilon_, y);
  }

 private:
  float epsilon_ = 1e-3f;
};

// NHWC geometry of GlobalAvgPool: n images of hw positions of c channels.
struct GlobalPoolGeometry {
  int64_t n = 0, hw = 0, c = 0;
};

inline absl::StatusOr<GlobalPoolGeometry> CheckGlobalPoolInput(const Tensor& x) {
  if (absl::Status s = ExpectDType(x, DType::kFloat32, "x"); !s.ok()) return s;
  if (x.shape().rank() != 4) {
    return absl::InvalidArgumentError(absl::StrCat("x must be NHWC (rank 4), got shape ", x.shape().DebugString()));
  }
  const TensorShape& s = x.shape();
  GlobalPoolGeometry g{s.dim(0), s.dim(1) * s.dim(2), s.dim(3)};
  if (g.hw == 0) {
    return absl::InvalidArgumentError(absl::StrCat("x ", s.DebugString(), " has no positions to average"));
  }
  return g;
}

// GlobalAvgPool(x) -> [n, c]. Impl::Run(ctx, geometry, x, out).
template <typename Impl>
class GlobalAvgPoolKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<GlobalPoolGeometry> g = CheckGlobalPoolInput(ctx->input(0));
    OP_REQUIRES_OK(ctx, g.status());
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, TensorShape{g->n, g->c});
    if (out == nullptr) return;
    Impl::Run(ctx, *g, ctx->input(0), out);
  }
};

// GlobalAvgPoolGrad(x, g) -> dx of x's shape. Impl::Run(ctx, geometry, g, dx).
template <typename Impl>
class GlobalAvgPoolGradKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    absl::StatusOr<GlobalPoolGeometry> g = CheckGlobalPoolInput(x);
    OP_REQUIRES_OK(ctx, g.status());
    const Tensor& grad = ctx->input(1);
    OP_REQUIRES_OK(ctx, ExpectDType(grad, DType::kFloat32, "gradient"));
    if (grad.shape() != TensorShape{g->n, g->c}) {
      OP_REQUIRES_OK(ctx, absl::InvalidArgumentError(absl::StrCat("gradient ", grad.shape().DebugString(),
                                                                   " must be [", g->n, ",", g->c, "] for x ",
                                                                   x.shape().DebugString())));
    }
    Tensor* dx = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (dx == nullptr) return;
    Impl::Run(ctx, *g, grad, dx);
  }
};

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_NORM_KERNELS_H_
