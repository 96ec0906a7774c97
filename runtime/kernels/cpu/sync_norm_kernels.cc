// CPU kernels of synchronised batch norm (graph/ops/sync_norm_ops.cc) on
// the shared skeletons (runtime/kernels/sync_norm_kernels.h). As in
// norm_kernels.cc, x is channel-last, rows are contiguous runs of channels
// and per-channel sums accumulate in double.
#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/cpu/norm_sums.h"
#include "runtime/kernels/sync_norm_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

using kernels::NormGeometry;

// The global row count, or an error naming it; at least 1.
bool ReadCount(OpKernelContext* ctx, const Tensor& count, double* n) {
  *n = count.data<float>()[0];
  if (!(*n >= 1.0) || !std::isfinite(*n)) {
    ctx->SetStatus(absl::InvalidArgumentError(
        absl::StrCat("count ", *n, ": the replicas' batches have no rows, so there are no statistics")));
    return false;
  }
  return true;
}

struct BatchNormSums {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& x, Tensor* sum, Tensor* sum_sq,
                  Tensor* count) {
    const int64_t nc = g.channels;
    Tensor holder;
    double* acc = ZeroedDoubles(ctx, 2 * nc, &holder);
    if (acc == nullptr) return;
    const float* xp = x.data<float>();
    for (int64_t r = 0; r < g.rows; ++r) {
      const float* row = xp + r * nc;
      for (int64_t c = 0; c < nc; ++c) {
        const double v = row[c];
        acc[c] += v;
        acc[nc + c] += v * v;
      }
    }
    for (int64_t c = 0; c < nc; ++c) {
      sum->data<float>()[c] = static_cast<float>(acc[c]);
      sum_sq->data<float>()[c] = static_cast<float>(acc[nc + c]);
    }
    count->data<float>()[0] = static_cast<float>(g.rows);
  }
};

struct BatchNormSumsGrad {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& x, const Tensor& g_sum,
                  const Tensor& g_sum_sq, Tensor* dx) {
    const int64_t nc = g.channels;
    const float* xp = x.data<float>();
    const float* gs = g_sum.data<float>();
    const float* gss = g_sum_sq.data<float>();
    float* dp = dx->data<float>();
    ParallelFor(ctx, g.rows, 2.0 * nc, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        for (int64_t c = 0; c < nc; ++c) dp[r * nc + c] = gs[c] + 2.0f * xp[r * nc + c] * gss[c];
      }
    });
  }
};

struct BatchNormFromSums {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& x, const Tensor& gamma,
                  const Tensor& beta, const Tensor& sum, const Tensor& sum_sq, const Tensor& count, float epsilon,
                  Tensor* y, Tensor* mean, Tensor* var, Tensor* inv_std) {
    double n = 0;
    if (!ReadCount(ctx, count, &n)) return;
    const int64_t nc = g.channels;
    absl::StatusOr<Tensor> t = ctx->allocate_temp(DType::kFloat32, TensorShape{2 * std::max<int64_t>(nc, 1)});
    OP_REQUIRES_OK(ctx, t.status());
    float* scale = t->data<float>();
    float* shift = scale + nc;
    const double unbias = n > 1.0 ? n / (n - 1.0) : 1.0;
    for (int64_t c = 0; c < nc; ++c) {
      const double m = sum.data<float>()[c] / n;
      const double biased = std::max(sum_sq.data<float>()[c] / n - m * m, 0.0);
      const double is = 1.0 / std::sqrt(biased + epsilon);
      mean->data<float>()[c] = static_cast<float>(m);
      var->data<float>()[c] = static_cast<float>(biased * unbias);
      inv_std->data<float>()[c] = static_cast<float>(is);
      scale[c] = static_cast<float>(gamma.data<float>()[c] * is);
      shift[c] = static_cast<float>(beta.data<float>()[c] - m * scale[c]);
    }
    const float* xp = x.data<float>();
    float* yp = y->data<float>();
    ParallelFor(ctx, g.rows, 2.0 * nc, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        for (int64_t c = 0; c < nc; ++c) yp[r * nc + c] = xp[r * nc + c] * scale[c] + shift[c];
      }
    });
  }
};

struct BatchNormFromSumsGrad {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& dy, const Tensor& x,
                  const Tensor& gamma, const Tensor& mean, const Tensor& inv_std, const Tensor& count,
                  Tensor* const outs[5]) {
    double n = 0;
    if (!ReadCount(ctx, count, &n)) return;
    const int64_t nc = g.channels;
    Tensor holder;
    double* acc = ZeroedDoubles(ctx, 2 * nc, &holder);
    if (acc == nullptr) return;
    double* sum_dy = acc;
    double* sum_dy_xhat = acc + nc;
    const float* dyp = dy.data<float>();
    const float* xp = x.data<float>();
    const float* mp = mean.data<float>();
    const float* ip = inv_std.data<float>();
    const float* gp = gamma.data<float>();
    SumDyAndDyXhat(g, dyp, xp, mp, ip, sum_dy, sum_dy_xhat);
    float* dgamma = outs[1]->data<float>();
    float* dbeta = outs[2]->data<float>();
    float* dsum = outs[3]->data<float>();
    float* dsum_sq = outs[4]->data<float>();
    for (int64_t c = 0; c < nc; ++c) {
      dbeta[c] = static_cast<float>(sum_dy[c]);
      dgamma[c] = static_cast<float>(sum_dy_xhat[c]);
      const double dmean = -static_cast<double>(gp[c]) * ip[c] * sum_dy[c];
      const double dvar = -0.5 * gp[c] * static_cast<double>(ip[c]) * ip[c] * sum_dy_xhat[c];
      dsum[c] = static_cast<float>((dmean - 2.0 * mp[c] * dvar) / n);
      dsum_sq[c] = static_cast<float>(dvar / n);
    }
    float* dxp = outs[0]->data<float>();
    ParallelFor(ctx, g.rows, 1.0 * nc, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        for (int64_t c = 0; c < nc; ++c) dxp[r * nc + c] = gp[c] * ip[c] * dyp[r * nc + c];
      }
    });
  }
};

WEFT_REGISTER_KERNEL("BatchNormSums", "CPU", kernels::BatchNormSumsKernel<BatchNormSums>);
WEFT_REGISTER_KERNEL("BatchNormSumsGrad", "CPU", kernels::BatchNormSumsGradKernel<BatchNormSumsGrad>);
WEFT_REGISTER_KERNEL("BatchNormFromSums", "CPU", kernels::BatchNormFromSumsKernel<BatchNormFromSums>);
WEFT_REGISTER_KERNEL("BatchNormFromSumsGrad", "CPU", kernels::BatchNormFromSumsGradKernel<BatchNormFromSumsGrad>);

}  // namespace
}  // namespace cpu
}  // namespace weft
