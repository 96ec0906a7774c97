// The embedding kernels (graph/ops/embedding_ops.cc), written once for every
// device as layer_norm_kernels.h's: each class template checks its op's
// operands, asks the device's `Impl` whether the ids are rows of the table,
// allocates the output and hands the operands to `Impl::Run`
// (cpu/embedding_kernels.cc, cuda/gpu_embedding_kernels.cc).
//
// An id is a row of params when it is a whole number in [0, rows): int32
// ids need only the range, float32 ids also a whole value (7.5 and NaN are
// refused). Reading the ids is the device's business, as the labels of
// SparseSoftmaxCrossEntropyWithLogits are (nn_kernels.h): the CPU refuses a
// bad id before it computes; the GPU records it while it computes and
// reports it on the node's next run. Both say where it was and what it held
// with BadIdError.
//
// Thread-safety: kernels are immutable after construction, apart from the
// state their Impl guards itself; Compute may run concurrently.
#ifndef WEFT_RUNTIME_KERNELS_EMBEDDING_KERNELS_H_
#define WEFT_RUNTIME_KERNELS_EMBEDDING_KERNELS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/checked_math.h"
#include "common/dtype.h"
#include "common/tensor.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace kernels {

// The table params [rows, width] and the ids (`ids` of them).
struct EmbeddingGeometry {
  int64_t rows = 0;
  int64_t width = 0;
  int64_t ids = 0;
};

// "ids[1,2] (flat index 5) is 7.5: ..." for the id at `where` holding
// `value` (an int32 id's value, or a float32 id's, exactly).
inline absl::Status BadIdError(absl::string_view where, double value, DType dtype, int64_t rows) {
  const std::string v =
      dtype == DType::kInt32 ? absl::StrCat(static_cast<int64_t>(value)) : absl::StrCat(static_cast<float>(value));
  return absl::InvalidArgumentError(absl::StrCat(where, " is ", v, ": an id must be a whole number in [0, ", rows,
                                                 ") (a row of params)"));
}

// "ids[1,2] (flat index 5)": position `flat` of ids shaped `shape`.
inline std::string IdPosition(const TensorShape& shape, int64_t flat) {
  std::string index;
  int64_t rest = flat;
  for (int d = shape.rank() - 1; d >= 0; --d) {
    const int64_t n = shape.dim(d);
    index = absl::StrCat(n > 0 ? rest % n : 0, d + 1 < shape.rank() ? "," : "", index);
    rest = n > 0 ? rest / n : 0;
  }
  return absl::StrCat("ids[", index, "] (flat index ", flat, ")");
}

// ids: float32 or int32, rank >= 1.
inline absl::Status CheckIdsOperand(const Tensor& ids) {
  if (ids.dtype() != DType::kFloat32 && ids.dtype() != DType::kInt32) {
    return absl::InvalidArgumentError(
        absl::StrCat("ids must be float32 or int32 (whole numbers naming rows of params), got ",
                     DTypeName(ids.dtype())));
  }
  if (ids.shape().rank() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ids must have rank >= 1, got shape ", ids.shape().DebugString()));
  }
  return absl::OkStatus();
}

// params [rows, width] float32 and the ids; out is ids' shape and a row.
inline absl::StatusOr<EmbeddingGeometry> CheckEmbeddingOperands(const Tensor& params, const Tensor& ids) {
  if (absl::Status s = ExpectDType(params, DType::kFloat32, "params"); !s.ok()) return s;
  if (absl::Status s = ExpectRank(params, 2, "params [rows, width]"); !s.ok()) return s;
  if (absl::Status s = CheckIdsOperand(ids); !s.ok()) return s;
  EmbeddingGeometry g{params.shape().dim(0), params.shape().dim(1), ids.NumElements()};
  int64_t out = 0;
  if (!CheckedMul(g.ids, g.width, &out)) {
    return absl::InvalidArgumentError(absl::StrCat("ids ", ids.shape().DebugString(), " of rows of params ",
                                                   params.shape().DebugString(), " overflow 64 bits"));
  }
  return g;
}

// ids' shape with a row of `width` appended.
inline TensorShape EmbeddingOutputShape(const Tensor& ids, int64_t width) {
  TensorShape s = ids.shape();
  s.AddDim(width);
  return s;
}

// EmbeddingGrad's operands (and EmbeddingGradRows'): ids, g of ids' shape
// and a row, and the table params.
inline absl::StatusOr<EmbeddingGeometry> CheckEmbeddingGradOperands(const Tensor& ids, const Tensor& grad,
                                                                    const Tensor& params) {
  absl::StatusOr<EmbeddingGeometry> g = CheckEmbeddingOperands(params, ids);
  if (!g.ok()) return g.status();
  if (absl::Status s = ExpectDType(grad, DType::kFloat32, "g"); !s.ok()) return s;
  const TensorShape want = EmbeddingOutputShape(ids, g->width);
  if (grad.shape() != want) {
    return absl::InvalidArgumentError(absl::StrCat("g ", grad.shape().DebugString(), " must be ids' shape ",
                                                   ids.shape().DebugString(), " and a row of params ",
                                                   params.shape().DebugString(), ": ", want.DebugString()));
  }
  return g;
}

// Embedding(params, ids) -> out. Impl (one per kernel, constructed with the
// kernel's OpKernelConstruction) has
//   absl::Status CheckIds(ctx, ids, rows), called before allocating, and
//   void Run(ctx, geometry, params, ids, out), with out non-empty.
template <typename Impl>
class EmbeddingKernel : public OpKernel {
 public:
  explicit EmbeddingKernel(OpKernelConstruction* c) : OpKernel(c), impl_(c) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& params = ctx->input(0);
    const Tensor& ids = ctx->input(1);
    absl::StatusOr<EmbeddingGeometry> g = CheckEmbeddingOperands(params, ids);
    OP_REQUIRES_OK(ctx, g.status());
    OP_REQUIRES_OK(ctx, impl_.CheckIds(ctx, ids, g->rows));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, EmbeddingOutputShape(ids, g->width));
    if (out == nullptr || g->ids == 0 || g->width == 0) return;
    impl_.Run(ctx, *g, params, ids, out);
  }
  absl::Status CheckRecordedLaunches() override { return internal::CheckRecordedLaunchesOf(impl_, 0); }

 private:
  Impl impl_;
};

// EmbeddingGrad(ids, g, params) -> dparams, params' shape. Impl as
// EmbeddingKernel's, with void Run(ctx, geometry, ids, g, dparams): it
// writes every element of dparams (zeros where no id points), also when
// there are no ids.
template <typename Impl>
class EmbeddingGradKernel : public OpKernel {
 public:
  explicit EmbeddingGradKernel(OpKernelConstruction* c) : OpKernel(c), impl_(c) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& ids = ctx->input(0);
    const Tensor& grad = ctx->input(1);
    const Tensor& params = ctx->input(2);
    absl::StatusOr<EmbeddingGeometry> g = CheckEmbeddingGradOperands(ids, grad, params);
    OP_REQUIRES_OK(ctx, g.status());
    OP_REQUIRES_OK(ctx, impl_.CheckIds(ctx, ids, g->rows));
    Tensor* dparams = ctx->allocate_output(0, DType::kFloat32, params.shape());
    if (dparams == nullptr || dparams->NumElements() == 0) return;
    impl_.Run(ctx, *g, ids, grad, dparams);
  }
  absl::Status CheckRecordedLaunches() override { return internal::CheckRecordedLaunchesOf(impl_, 0); }

 private:
  Impl impl_;
};

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_EMBEDDING_KERNELS_H_
