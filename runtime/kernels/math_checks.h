// Input checks of the math ops (graph/ops/math_ops.cc), shared by their CPU
// kernels (cpu/math_kernels.cc) and GPU kernels (cuda/
// gpu_math_kernels.cc), so that a bad input gets the same error on either
// device. Each returns INVALID_ARGUMENT naming the operand at fault.
//
// Thread-safety: pure functions.
#ifndef WEFT_RUNTIME_KERNELS_MATH_CHECKS_H_
#define WEFT_RUNTIME_KERNELS_MATH_CHECKS_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/tensor.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace kernels {

// BiasAdd: a rank-1 bias as long as x's last dimension.
inline absl::Status CheckBiasAdd(const Tensor& x, const Tensor& bias) {
  if (absl::Status s = ExpectRank(bias, 1, "bias"); !s.ok()) return s;
  const int r = x.shape().rank();
  if (r < 1 || x.shape().dim(r - 1) != bias.shape().dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat("bias ", bias.shape().DebugString(),
                                                   " must match the last dimension of x ", x.shape().DebugString()));
  }
  return absl::OkStatus();
}

// BiasAddGrad: a gradient of rank >= 1.
inline absl::Status CheckBiasAddGrad(const Tensor& g) {
  if (g.shape().rank() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("gradient must have rank >= 1, got ", g.shape().DebugString()));
  }
  return absl::OkStatus();
}

// Add, Sub, Mul: the same shape, or a scalar second operand.
inline absl::Status CheckBinaryOperands(const Tensor& x, const Tensor& y) {
  if (y.shape().rank() != 0 && x.shape() != y.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("incompatible shapes ", x.shape().DebugString(), " and ",
                                                   y.shape().DebugString(),
                                                   ": operands need the same shape, or a scalar second operand"));
  }
  return absl::OkStatus();
}

// AddN: every input of input 0's shape.
inline absl::Status CheckAddNInputs(OpKernelContext* ctx) {
  const Tensor& x0 = ctx->input(0);
  for (int i = 1; i < ctx->num_inputs(); ++i) {
    if (ctx->input(i).shape() != x0.shape()) {
      return absl::InvalidArgumentError(absl::StrCat("input ", i, " has shape ", ctx->input(i).shape().DebugString(),
                                                     ", input 0 has ", x0.shape().DebugString()));
    }
  }
  return absl::OkStatus();
}

// SumGrad, MeanGrad: a scalar gradient.
inline absl::Status CheckScalarGradient(const Tensor& g) {
  if (g.NumElements() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("gradient must be a scalar, got shape ", g.shape().DebugString()));
  }
  return absl::OkStatus();
}

// ScaleRows: a matrix and one scale per row.
inline absl::Status CheckScaleRows(const Tensor& m, const Tensor& s) {
  if (absl::Status st = ExpectRank(m, 2, "matrix"); !st.ok()) return st;
  if (absl::Status st = ExpectRank(s, 1, "scale"); !st.ok()) return st;
  if (s.shape().dim(0) != m.shape().dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat("scale ", s.shape().DebugString(),
                                                   " needs one entry per row of matrix ", m.shape().DebugString()));
  }
  return absl::OkStatus();
}

// RowDot: two matrices of one shape.
inline absl::Status CheckRowDot(const Tensor& x, const Tensor& y) {
  if (absl::Status s = ExpectRank(x, 2, "x"); !s.ok()) return s;
  return ExpectSameShape(x, y, "x", "y");
}

// ArgMax: a non-empty last axis.
inline absl::Status CheckArgMax(const Tensor& x) {
  const int r = x.shape().rank();
  if (r < 1 || x.shape().dim(r - 1) <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("x needs a non-empty last axis, got shape ", x.shape().DebugString()));
  }
  return absl::OkStatus();
}

// Equal: one shape and one dtype (which dtypes a device supports is its own).
inline absl::Status CheckEqualOperands(const Tensor& x, const Tensor& y) {
  if (absl::Status s = ExpectSameShape(x, y, "x", "y"); !s.ok()) return s;
  if (x.dtype() != y.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("x and y must have the same dtype, got ", DTypeName(x.dtype()),
                                                   " and ", DTypeName(y.dtype())));
  }
  return absl::OkStatus();
}

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_MATH_CHECKS_H_
