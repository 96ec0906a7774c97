// The layer normalisation kernels (graph/ops/layer_norm_ops.cc), written
// once for every device as norm_kernels.h's: each class template reads its
// op's inputs and epsilon, runs the checks, allocates the outputs and hands
// the operands to `Impl::Run`, the device's computation
// (cpu/layer_norm_kernels.cc, cuda/gpu_layer_norm_kernels.cc).
//
// x is viewed as `rows` rows of `channels` (its last axis), as BatchNorm's
// NormGeometry; every statistic is per row, over its channels. A row of no
// channels has no mean, so both ops refuse an empty last axis; an empty
// batch (no rows) is fine: LayerNorm's outputs are empty, and
// LayerNormGrad's dgamma and dbeta are zero.
//
// Thread-safety: kernels are immutable after construction; Compute may run
// concurrently.
#ifndef WEFT_RUNTIME_KERNELS_LAYER_NORM_KERNELS_H_
#define WEFT_RUNTIME_KERNELS_LAYER_NORM_KERNELS_H_

#include <initializer_list>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/tensor.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/kernels/norm_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace kernels {

// x (input `x_input`: float32, rank >= 2, a non-empty last axis), its
// channel vectors and its row vectors, each (input, role) float32
// [channels] or [rows].
inline absl::StatusOr<NormGeometry> CheckLayerNormInputs(
    OpKernelContext* ctx, int x_input, std::initializer_list<std::pair<int, const char*>> channel_vectors,
    std::initializer_list<std::pair<int, const char*>> row_vectors) {
  absl::StatusOr<NormGeometry> g = CheckNormInputs(ctx, x_input, {});
  if (!g.ok()) return g;
  const Tensor& x = ctx->input(x_input);
  if (g->channels == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("x ", x.shape().DebugString(), " has an empty last axis: a row of no values has no mean"));
  }
  for (const auto& [i, role] : channel_vectors) {
    const Tensor& v = ctx->input(i);
    if (absl::Status s = ExpectDType(v, DType::kFloat32, role); !s.ok()) return s;
    if (v.shape().rank() != 1 || v.shape().dim(0) != g->channels) {
      return absl::InvalidArgumentError(absl::StrCat(role, " ", v.shape().DebugString(),
                                                     " needs one entry per channel of x ", x.shape().DebugString(),
                                                     " (its last axis)"));
    }
  }
  for (const auto& [i, role] : row_vectors) {
    const Tensor& v = ctx->input(i);
    if (absl::Status s = ExpectDType(v, DType::kFloat32, role); !s.ok()) return s;
    if (v.shape().rank() != 1 || v.shape().dim(0) != g->rows) {
      return absl::InvalidArgumentError(absl::StrCat(role, " ", v.shape().DebugString(),
                                                     " needs one entry per row of x ", x.shape().DebugString(), " (",
                                                     g->rows, " rows)"));
    }
  }
  return g;
}

// LayerNorm(x, gamma, beta) -> (y, mean, inv_std).
// Impl::Run(ctx, geometry, x, gamma, beta, epsilon, y, mean, inv_std) with
// geometry.rows >= 1 and geometry.channels >= 1.
template <typename Impl>
class LayerNormKernel : public OpKernel {
 public:
  explicit LayerNormKernel(OpKernelConstruction* c) : OpKernel(c) { GetAttr(c, ReadEpsilon(c->def()), &epsilon_); }
  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<NormGeometry> g = CheckLayerNormInputs(ctx, 0, {{1, "gamma"}, {2, "beta"}}, {});
    OP_REQUIRES_OK(ctx, g.status());
    const Tensor& x = ctx->input(0);
    const TensorShape rows{g->rows};
    Tensor* y = ctx->allocate_output(0, DType::kFloat32, x.shape());
    Tensor* mean = y == nullptr ? nullptr : ctx->allocate_output(1, DType::kFloat32, rows);
    Tensor* inv_std = mean == nullptr ? nullptr : ctx->allocate_output(2, DType::kFloat32, rows);
    if (inv_std == nullptr || g->rows == 0) return;
    Impl::Run(ctx, *g, x, ctx->input(1), ctx->input(2), epsilon_, y, mean, inv_std);
  }

 private:
  float epsilon_ = 1e-3f;
};

// LayerNormGrad(dy, x, gamma, mean, inv_std) -> (dx, dgamma, dbeta).
// Impl::Run(ctx, geometry, dy, x, gamma, mean, inv_std, dx, dgamma, dbeta)
// with geometry.channels >= 1; geometry.rows may be 0, when Run must zero
// dgamma and dbeta.
template <typename Impl>
class LayerNormGradKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<NormGeometry> g = CheckLayerNormInputs(ctx, 1, {{2, "gamma"}}, {{3, "mean"}, {4, "inv_std"}});
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

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_LAYER_NORM_KERNELS_H_
