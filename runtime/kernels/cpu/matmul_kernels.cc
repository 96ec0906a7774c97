// CPU MatMul: Eigen's GEMM on row-major views of the inputs; transposes are
// views too, so nothing is copied. With intra-op threads, the output's rows
// are split across them. Attributes, checks and the output are the shared
// skeleton's (runtime/kernels/math_kernels.h).
//
// With a compute_type of float16 or bfloat16 the operands are first copied,
// rounded to nearest even in that type, and the product of the copies
// accumulates in float32: the numbers a GPU's tensor cores give (up to the
// order of the sums), so a mixed-precision job computes the same on a CPU,
// only without the speed-up.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/math_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

// C = A * B, A and B being (possibly transposed) Eigen views.
template <typename A, typename B>
void Gemm(OpKernelContext* ctx, const A& a, const B& b, MatrixMap* c) {
  const int64_t k = a.cols();
  ParallelFor(ctx, c->rows(), 2.0 * k * c->cols(), [&](int64_t begin, int64_t end) {
    if (begin == 0 && end == c->rows()) {
      c->noalias() = a * b;
    } else {
      c->middleRows(begin, end - begin).noalias() = a.middleRows(begin, end - begin) * b;
    }
  });
}

// x rounded to nearest even in bfloat16 (float32's upper 16 bits); NaN
// stays NaN.
float RoundToBFloat16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return x;
  bits += 0x7fffu + ((bits >> 16) & 1u);
  bits &= 0xffff0000u;
  std::memcpy(&x, &bits, 4);
  return x;
}

// A copy of `t` rounded to `type`, held by `holder`; nullptr, with the
// error recorded, when the allocator refuses.
const float* Rounded(OpKernelContext* ctx, const Tensor& t, ComputeType type, Tensor* holder) {
  absl::StatusOr<Tensor> copy = ctx->allocate_temp(DType::kFloat32, t.shape());
  if (!copy.ok()) {
    ctx->SetStatus(copy.status());
    return nullptr;
  }
  *holder = *std::move(copy);
  const float* x = t.data<float>();
  float* y = holder->data<float>();
  const bool half = type == ComputeType::kFloat16;
  ParallelFor(ctx, t.NumElements(), 4, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = half ? static_cast<float>(Half(x[i])) : RoundToBFloat16(x[i]);
  });
  return y;
}

struct MatMul {
  static void Run(OpKernelContext* ctx, const Tensor& a, const Tensor& b, const kernels::MatMulDims& d, Tensor* out) {
    MatrixMap c(out->data<float>(), d.m, d.n);
    if (d.k == 0) {
      c.setZero();
      return;
    }
    const float* ap = a.data<float>();
    const float* bp = b.data<float>();
    Tensor a_rounded, b_rounded;
    if (d.compute != ComputeType::kFloat32) {
      ap = Rounded(ctx, a, d.compute, &a_rounded);
      bp = ap == nullptr ? nullptr : Rounded(ctx, b, d.compute, &b_rounded);
      if (bp == nullptr) return;
    }
    ConstMatrixMap am(ap, d.a0, d.a1);
    ConstMatrixMap bm(bp, d.b0, d.b1);
    if (!d.ta && !d.tb) {
      Gemm(ctx, am, bm, &c);
    } else if (!d.ta && d.tb) {
      Gemm(ctx, am, bm.transpose(), &c);
    } else if (d.ta && !d.tb) {
      Gemm(ctx, am.transpose(), bm, &c);
    } else {
      Gemm(ctx, am.transpose(), bm.transpose(), &c);
    }
  }
};

WEFT_REGISTER_KERNEL("MatMul", "CPU", kernels::MatMulKernel<MatMul>);

}  // namespace
}  // namespace cpu
}  // namespace weft
