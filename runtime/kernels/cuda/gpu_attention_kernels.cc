// GPU kernels for Attention and AttentionGrad (graph/ops/attention_ops.cc),
// on the skeletons the CPU kernels share (runtime/kernels/attention_kernels.h):
// the same checks, messages and outputs.
//
// The products are cuBLAS strided-batched GEMMs (FP32), one call per head
// and product, batched over the examples: head h of every example sits at
// a fixed stride (seq * width) in q, k, v and out, and at heads * seq * seq
// in probs. The row-wise steps (scale, mask and softmax; the softmax's
// backward) are attention.cu's. The backward pass takes [batch, heads, seq,
// seq] floats of scratch for dP, turned into dS in place.
//
//   forward:  probs_h = softmax(scale q_h k_h^T), out_h = probs_h v_h
//   backward: dv_h = probs_h^T dout_h, dP = dout_h v_h^T,
//             dS = scale probs (dP - rowsum(probs dP)),
//             dq_h = dS k_h, dk_h = dS^T q_h
#include <climits>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/kernels/attention_kernels.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {
namespace {

using kernels::AttentionGeometry;

// A row-major operand: its pointer, row length as stored and the stride
// between consecutive examples.
struct Operand {
  const float* p;
  int64_t ld;
  int64_t stride;
};

// C[i] = op(A[i]) op(B[i]) for i < batch, row-major (see RowMajorGemm,
// gpu_kernel_util.h: cuBLAS computes C^T = op(B)^T op(A)^T).
absl::Status RowMajorGemmBatched(cublasHandle_t handle, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                                 int64_t k, Operand a, Operand b, float* c, int64_t ldc, int64_t stride_c,
                                 int64_t batch) {
  for (int64_t v : {m, n, k, a.ld, b.ld, ldc, batch}) {
    if (v > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("attention dimension ", v, " is too large for cuBLAS"));
    }
  }
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t st = cublasSgemmStridedBatched(
      handle, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
      static_cast<int>(m), static_cast<int>(k), &one, b.p, static_cast<int>(b.ld), b.stride, a.p,
      static_cast<int>(a.ld), a.stride, &zero, c, static_cast<int>(ldc), stride_c, static_cast<int>(batch));
  return st == CUBLAS_STATUS_SUCCESS ? absl::OkStatus() : gpu::CublasStatus(st, "cublasSgemmStridedBatched");
}

// Head h of a [batch, seq, width] tensor, and of a [batch, heads, seq, seq] one.
Operand HeadOf(const float* t, const AttentionGeometry& g, int64_t h) {
  return Operand{t + h * g.head_dim, g.width, g.seq * g.width};
}
Operand ProbsOf(const float* t, const AttentionGeometry& g, int64_t h) {
  return Operand{t + h * g.seq * g.seq, g.seq, g.heads * g.seq * g.seq};
}

// C = op(A) op(B) into head h of a [batch, seq, width] tensor.
absl::Status IntoHead(OpKernelContext* ctx, const AttentionGeometry& g, int64_t h, bool ta, int64_t k, Operand a,
                      Operand b, float* c) {
  return RowMajorGemmBatched(Gpu(ctx)->cublas(), ta, false, g.seq, g.head_dim, k, a, b, c + h * g.head_dim, g.width,
                             g.seq * g.width, g.batch);
}

// C = A_h B_h^T into the [seq, seq] matrices of head h.
absl::Status IntoProbs(OpKernelContext* ctx, const AttentionGeometry& g, int64_t h, Operand a, Operand b, float* c) {
  return RowMajorGemmBatched(Gpu(ctx)->cublas(), false, true, g.seq, g.seq, g.head_dim, a, b, c + h * g.seq * g.seq,
                             g.seq, g.heads * g.seq * g.seq, g.batch);
}

const float* F(const Tensor& t) { return t.data<float>(); }
float* F(Tensor* t) { return t->data<float>(); }

struct Attention {
  static void Run(OpKernelContext* ctx, const AttentionGeometry& g, const Tensor& q, const Tensor& k,
                  const Tensor& v, Tensor* out, Tensor* probs) {
    for (int64_t h = 0; h < g.heads; ++h) {
      OP_REQUIRES_OK(ctx, IntoProbs(ctx, g, h, HeadOf(F(q), g, h), HeadOf(F(k), g, h), F(probs)));
    }
    OP_REQUIRES_CUDA(ctx,
                     LaunchAttentionSoftmax(F(probs), g.batch * g.heads * g.seq, g.seq, g.causal, g.scale,
                                            Stream(ctx)),
                     "Attention softmax kernel");
    for (int64_t h = 0; h < g.heads; ++h) {
      OP_REQUIRES_OK(ctx, IntoHead(ctx, g, h, false, g.seq, ProbsOf(F(*probs), g, h), HeadOf(F(v), g, h), F(out)));
    }
  }
};

struct AttentionGrad {
  static void Run(OpKernelContext* ctx, const AttentionGeometry& g, const Tensor& dout, const Tensor& q,
                  const Tensor& k, const Tensor& v, const Tensor& probs, Tensor* dq, Tensor* dk, Tensor* dv) {
    absl::StatusOr<Tensor> scratch = Scratch(ctx, g.batch * g.heads * g.seq * g.seq);
    OP_REQUIRES_OK(ctx, scratch.status());
    float* ds = F(&*scratch);
    for (int64_t h = 0; h < g.heads; ++h) {
      const Operand p = ProbsOf(F(probs), g, h), d_o = HeadOf(F(dout), g, h);
      OP_REQUIRES_OK(ctx, IntoHead(ctx, g, h, true, g.seq, p, d_o, F(dv)));
      OP_REQUIRES_OK(ctx, IntoProbs(ctx, g, h, d_o, HeadOf(F(v), g, h), ds));
    }
    OP_REQUIRES_CUDA(ctx,
                     LaunchAttentionSoftmaxGrad(F(probs), ds, g.batch * g.heads * g.seq, g.seq, g.scale, Stream(ctx)),
                     "AttentionGrad softmax kernel");
    for (int64_t h = 0; h < g.heads; ++h) {
      const Operand s = ProbsOf(ds, g, h);
      OP_REQUIRES_OK(ctx, IntoHead(ctx, g, h, false, g.seq, s, HeadOf(F(k), g, h), F(dq)));
      OP_REQUIRES_OK(ctx, IntoHead(ctx, g, h, true, g.seq, s, HeadOf(F(q), g, h), F(dk)));
    }
  }
};

WEFT_REGISTER_KERNEL("Attention", "GPU", kernels::AttentionKernel<Attention>);
WEFT_REGISTER_KERNEL("AttentionGrad", "GPU", kernels::AttentionGradKernel<AttentionGrad>);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
