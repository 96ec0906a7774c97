// CPU kernels for Attention and AttentionGrad: parallel over the (example,
// head) pairs, each pair's products in Eigen on strided views of its head's
// columns (no copies of q, k, v). The softmax subtracts each row's maximum
// before exp, so large scores cannot overflow, and sums in double; masked
// entries (above the diagonal when causal) are exactly 0. Checks, attributes
// and outputs are the shared skeleton's (runtime/kernels/attention_kernels.h).
#include <algorithm>
#include <cmath>

#include "Eigen/Core"
#include "runtime/kernels/attention_kernels.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

using kernels::AttentionGeometry;
using Stride = Eigen::OuterStride<>;
using HeadMap = Eigen::Map<RowMatrix, 0, Stride>;
using ConstHeadMap = Eigen::Map<const RowMatrix, 0, Stride>;

// Head h of example b in a [batch, seq, width] tensor, as a [seq, head_dim] matrix.
ConstHeadMap Head(const Tensor& t, const AttentionGeometry& g, int64_t b, int64_t h) {
  return ConstHeadMap(t.data<float>() + g.HeadOffset(b, h), g.seq, g.head_dim, Stride(g.width));
}
HeadMap Head(Tensor* t, const AttentionGeometry& g, int64_t b, int64_t h) {
  return HeadMap(t->data<float>() + g.HeadOffset(b, h), g.seq, g.head_dim, Stride(g.width));
}

// Per (b, h) pair: about 4 seq^2 head_dim flops for the two products.
double PairCost(const AttentionGeometry& g) { return 4.0 * g.seq * g.seq * std::max<int64_t>(g.head_dim, 8); }

// Row i of p (length n) becomes its softmax over columns [0, limit), 0 past it.
void SoftmaxRow(float* p, int64_t n, int64_t limit) {
  float m = p[0];
  for (int64_t j = 1; j < limit; ++j) m = std::max(m, p[j]);
  double sum = 0.0;
  for (int64_t j = 0; j < limit; ++j) {
    p[j] = std::exp(p[j] - m);
    sum += p[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < limit; ++j) p[j] *= inv;
  for (int64_t j = limit; j < n; ++j) p[j] = 0.0f;
}

struct Attention {
  static void Run(OpKernelContext* ctx, const AttentionGeometry& g, const Tensor& q, const Tensor& k,
                  const Tensor& v, Tensor* out, Tensor* probs) {
    const int64_t s = g.seq;
    ParallelFor(ctx, g.batch * g.heads, PairCost(g), [&](int64_t begin, int64_t end) {
      for (int64_t pair = begin; pair < end; ++pair) {
        const int64_t b = pair / g.heads, h = pair % g.heads;
        MatrixMap p(probs->data<float>() + g.ProbsOffset(b, h), s, s);
        p.noalias() = Head(q, g, b, h) * Head(k, g, b, h).transpose();
        p *= g.scale;
        for (int64_t i = 0; i < s; ++i) SoftmaxRow(p.data() + i * s, s, g.causal ? i + 1 : s);
        Head(out, g, b, h).noalias() = p * Head(v, g, b, h);
      }
    });
  }
};

struct AttentionGrad {
  static void Run(OpKernelContext* ctx, const AttentionGeometry& g, const Tensor& dout, const Tensor& q,
                  const Tensor& k, const Tensor& v, const Tensor& probs, Tensor* dq, Tensor* dk, Tensor* dv) {
    const int64_t s = g.seq;
    ParallelFor(ctx, g.batch * g.heads, 2.5 * PairCost(g), [&](int64_t begin, int64_t end) {
      RowMatrix ds(s, s);  // dP, then dS in place
      for (int64_t pair = begin; pair < end; ++pair) {
        const int64_t b = pair / g.heads, h = pair % g.heads;
        ConstMatrixMap p(probs.data<float>() + g.ProbsOffset(b, h), s, s);
        ConstHeadMap d_o = Head(dout, g, b, h);
        Head(dv, g, b, h).noalias() = p.transpose() * d_o;
        ds.noalias() = d_o * Head(v, g, b, h).transpose();
        for (int64_t i = 0; i < s; ++i) {
          const float* pr = p.data() + i * s;
          float* dr = ds.data() + i * s;
          double dot = 0.0;
          for (int64_t j = 0; j < s; ++j) dot += static_cast<double>(pr[j]) * dr[j];
          const float d = static_cast<float>(dot);
          for (int64_t j = 0; j < s; ++j) dr[j] = pr[j] * (dr[j] - d);
        }
        ds *= g.scale;
        Head(dq, g, b, h).noalias() = ds * Head(k, g, b, h);
        Head(dk, g, b, h).noalias() = ds.transpose() * Head(q, g, b, h);
      }
    });
  }
};

WEFT_REGISTER_KERNEL("Attention", "CPU", kernels::AttentionKernel<Attention>);
WEFT_REGISTER_KERNEL("AttentionGrad", "CPU", kernels::AttentionGradKernel<AttentionGrad>);

}  // namespace
}  // namespace cpu
}  // namespace weft
