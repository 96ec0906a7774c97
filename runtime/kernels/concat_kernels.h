// The last-axis join ops' kernels (Concat, ConcatGrad: graph/ops/
// concat_ops.cc), written once for every device as in math_kernels.h: each
// class template checks the inputs (ConcatLayout), allocates the outputs
// and, when there is anything to copy, hands the layout to `Impl`, the
// device's copy (cpu/join_pool_kernels.cc, cuda/gpu_join_pool_kernels.cc).
//
// Row-major tensors joined along the last axis are `rows` rows (the product
// of the other dims) in which input k holds `widths[k]` contiguous floats
// starting at `offsets[k]` of the joined row of `total` floats.
//
// Thread-safety: kernels are immutable after construction; Compute may run
// concurrently.
#ifndef WEFT_RUNTIME_KERNELS_CONCAT_KERNELS_H_
#define WEFT_RUNTIME_KERNELS_CONCAT_KERNELS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/tensor.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace kernels {

struct ConcatLayout {
  int64_t rows = 1;
  int64_t total = 0;  // the joined last axis
  std::vector<int64_t> widths, offsets;
  TensorShape joined;
};

// The layout of ctx's inputs [first, first + count) joined along the last
// axis; INVALID_ARGUMENT naming the input whose dtype, rank or other dims
// differ from input `first`'s.
inline absl::StatusOr<ConcatLayout> ComputeConcatLayout(OpKernelContext* ctx, int first, int count) {
  const TensorShape& s0 = ctx->input(first).shape();
  if (s0.rank() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("input 0 must have rank >= 1, got ", s0.DebugString()));
  }
  ConcatLayout l;
  const int last = s0.rank() - 1;
  for (int d = 0; d < last; ++d) l.rows *= s0.dim(d);
  for (int k = 0; k < count; ++k) {
    const Tensor& x = ctx->input(first + k);
    if (absl::Status s = ExpectDType(x, DType::kFloat32, absl::StrCat("input ", k)); !s.ok()) return s;
    const TensorShape& s = x.shape();
    bool same = s.rank() == s0.rank();
    for (int d = 0; same && d < last; ++d) same = s.dim(d) == s0.dim(d);
    if (!same) {
      return absl::InvalidArgumentError(absl::StrCat("input ", k, " ", s.DebugString(), " differs from input 0 ",
                                                     s0.DebugString(), " in more than the last axis"));
    }
    l.offsets.push_back(l.total);
    l.widths.push_back(s.dim(last));
    if (!CheckedAdd(l.total, s.dim(last), &l.total)) {
      return absl::InvalidArgumentError(absl::StrCat("the joined last axis overflows 64 bits at input ", k));
    }
  }
  l.joined = s0;
  l.joined.set_dim(last, l.total);
  return l;
}

// Concat(x_1..x_n) -> y. Impl::Run(ctx, layout, out): copies input k's rows
// into out's columns [offsets[k], offsets[k] + widths[k]).
template <typename Impl>
class ConcatKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<ConcatLayout> l = ComputeConcatLayout(ctx, 0, ctx->num_inputs());
    OP_REQUIRES_OK(ctx, l.status());
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, l->joined);
    if (out == nullptr || out->NumElements() == 0) return;
    Impl::Run(ctx, *l, out);
  }
};

// ConcatGrad(g, x_1..x_n) -> (dx_1..dx_n). Impl::Run(ctx, layout, g, outs):
// copies g's columns of input k into outs[k], which is null where empty.
template <typename Impl>
class ConcatGradKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const int n = ctx->num_outputs();
    OP_REQUIRES(ctx, ctx->num_inputs() == n + 1,
                absl::InvalidArgumentError(absl::StrCat("ConcatGrad takes the gradient and ", n, " inputs, got ",
                                                        ctx->num_inputs(), " inputs")));
    absl::StatusOr<ConcatLayout> l = ComputeConcatLayout(ctx, 1, n);
    OP_REQUIRES_OK(ctx, l.status());
    const Tensor& g = ctx->input(0);
    OP_REQUIRES_OK(ctx, ExpectDType(g, DType::kFloat32, "gradient"));
    OP_REQUIRES(ctx, g.shape() == l->joined,
                absl::InvalidArgumentError(absl::StrCat("gradient ", g.shape().DebugString(),
                                                        " does not match the concatenation ",
                                                        l->joined.DebugString())));
    std::vector<Tensor*> outs(n, nullptr);
    bool any = false;
    for (int k = 0; k < n; ++k) {
      Tensor* out = ctx->allocate_output(k, DType::kFloat32, ctx->input(k + 1).shape());
      if (out == nullptr) return;
      if (out->NumElements() > 0) {
        outs[k] = out;
        any = true;
      }
    }
    if (any) Impl::Run(ctx, *l, g, outs);
  }
};

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_CONCAT_KERNELS_H_
