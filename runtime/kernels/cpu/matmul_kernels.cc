// CPU MatMul: Eigen's GEMM on row-major views of the inputs; transposes are
// views too, so nothing is copied. With intra-op threads, the output's rows
// are split across them.
#include "absl/strings/str_cat.h"
#include "runtime/kernels/cpu/kernel_util.h"
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

class MatMulOp : public OpKernel {
 public:
  explicit MatMulOp(OpKernelConstruction* c) : OpKernel(c) {
    if (!GetAttr(c, GetBoolAttrOr(c->def(), "transpose_a", false), &ta_)) return;
    GetAttr(c, GetBoolAttrOr(c->def(), "transpose_b", false), &tb_);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    OP_REQUIRES_OK(ctx, ExpectRank(a, 2, "a"));
    OP_REQUIRES_OK(ctx, ExpectRank(b, 2, "b"));
    const int64_t a0 = a.shape().dim(0), a1 = a.shape().dim(1);
    const int64_t b0 = b.shape().dim(0), b1 = b.shape().dim(1);
    const int64_t m = ta_ ? a1 : a0, k = ta_ ? a0 : a1;
    const int64_t kb = tb_ ? b1 : b0, n = tb_ ? b0 : b1;
    OP_REQUIRES(ctx, k == kb,
                absl::InvalidArgumentError(absl::StrCat("inner dimensions differ: ", a.shape().DebugString(),
                                                        ta_ ? "^T" : "", " x ", b.shape().DebugString(),
                                                        tb_ ? "^T" : "")));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, TensorShape{m, n});
    if (out == nullptr || m == 0 || n == 0) return;
    MatrixMap c(out->data<float>(), m, n);
    if (k == 0) {
      c.setZero();
      return;
    }
    ConstMatrixMap am(a.data<float>(), a0, a1);
    ConstMatrixMap bm(b.data<float>(), b0, b1);
    if (!ta_ && !tb_) {
      Gemm(ctx, am, bm, &c);
    } else if (!ta_ && tb_) {
      Gemm(ctx, am, bm.transpose(), &c);
    } else if (ta_ && !tb_) {
      Gemm(ctx, am.transpose(), bm, &c);
    } else {
      Gemm(ctx, am.transpose(), bm.transpose(), &c);
    }
  }

 private:
  bool ta_ = false;
  bool tb_ = false;
};

WEFT_REGISTER_KERNEL("MatMul", "CPU", MatMulOp);

}  // namespace
}  // namespace cpu
}  // namespace weft
