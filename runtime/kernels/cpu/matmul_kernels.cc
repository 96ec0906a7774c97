// CPU MatMul: Eigen's GEMM on row-major views of the inputs; transposes are
// views too, so nothing is copied. With intra-op threads, the output's rows
// are split across them. Attributes, checks and the output are the shared
// skeleton's (runtime/kernels/math_kernels.h).
#include "absl/strings/str_cat.h"
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

struct MatMul {
  static void Run(OpKernelContext* ctx, const Tensor& a, const Tensor& b, const kernels::MatMulDims& d, Tensor* out) {
    MatrixMap c(out->data<float>(), d.m, d.n);
    if (d.k == 0) {
      c.setZero();
      return;
    }
    ConstMatrixMap am(a.data<float>(), d.a0, d.a1);
    ConstMatrixMap bm(b.data<float>(), d.b0, d.b1);
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
