// CPU kernels for BatchNorm (+Grad, Inference) and GlobalAvgPool (+Grad).
// x is channel-last, so every loop runs over a contiguous row of channels
// and vectorises; per-channel sums accumulate in double across the rows, so
// a large batch loses no precision to float rounding. Checks, attributes and
// outputs are the shared skeleton's (runtime/kernels/norm_kernels.h).
#include <algorithm>
#include <cmath>

#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/cpu/norm_sums.h"
#include "runtime/kernels/norm_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

using kernels::GlobalPoolGeometry;
using kernels::NormGeometry;

// acc[c] += row[c].
void AccumulateRow(const float* __restrict row, double* __restrict acc, int64_t nc) {
  for (int64_t c = 0; c < nc; ++c) acc[c] += row[c];
}

// y[r, c] = x[r, c] * scale[c] + shift[c] over the rows.
void ScaleShiftRows(OpKernelContext* ctx, const NormGeometry& g, const float* xp, const float* scale,
                    const float* shift, float* yp) {
  const int64_t nc = g.channels;
  ParallelFor(ctx, g.rows, 2.0 * nc, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = xp + r * nc;
      float* yr = yp + r * nc;
      for (int64_t c = 0; c < nc; ++c) yr[c] = xr[c] * scale[c] + shift[c];
    }
  });
}

struct BatchNorm {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& x, const Tensor& gamma,
                  const Tensor& beta, float epsilon, Tensor* y, Tensor* mean, Tensor* var, Tensor* inv_std) {
    const int64_t nc = g.channels;
    Tensor holder;
    double* acc = ZeroedDoubles(ctx, nc, &holder);
    if (acc == nullptr) return;
    const float* xp = x.data<float>();
    for (int64_t r = 0; r < g.rows; ++r) AccumulateRow(xp + r * nc, acc, nc);
    float* mp = mean->data<float>();
    for (int64_t c = 0; c < nc; ++c) mp[c] = static_cast<float>(acc[c] / g.rows);
    // Second pass over the deviations: no cancellation, unlike E[x^2] - E[x]^2.
    std::fill(acc, acc + nc, 0.0);
    for (int64_t r = 0; r < g.rows; ++r) {
      const float* row = xp + r * nc;
      for (int64_t c = 0; c < nc; ++c) {
        const double d = row[c] - mp[c];
        acc[c] += d * d;
      }
    }
    float* vp = var->data<float>();
    float* ip = inv_std->data<float>();
    const double unbias = g.rows > 1 ? static_cast<double>(g.rows) / (g.rows - 1) : 1.0;
    for (int64_t c = 0; c < nc; ++c) {
      const double biased = acc[c] / g.rows;
      vp[c] = static_cast<float>(biased * unbias);
      ip[c] = static_cast<float>(1.0 / std::sqrt(biased + epsilon));
    }
    // y = x * scale + shift, scale = gamma inv_std, shift = beta - mean scale.
    float* scale = reinterpret_cast<float*>(acc);  // nc floats fit in nc doubles
    float* shift = scale + nc;
    const float* gp = gamma.data<float>();
    const float* bp = beta.data<float>();
    for (int64_t c = 0; c < nc; ++c) {
      scale[c] = gp[c] * ip[c];
      shift[c] = bp[c] - mp[c] * scale[c];
    }
    ScaleShiftRows(ctx, g, xp, scale, shift, y->data<float>());
  }
};

// With xhat = (x - mean) inv_std and M rows:
//   dbeta = sum dy, dgamma = sum dy xhat,
//   dx = gamma inv_std / M (M dy - dbeta - xhat dgamma).
struct BatchNormGrad {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& dy, const Tensor& x,
                  const Tensor& gamma, const Tensor& mean, const Tensor& inv_std, Tensor* dx, Tensor* dgamma,
                  Tensor* dbeta) {
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
    SumDyAndDyXhat(g, dyp, xp, mp, ip, sum_dy, sum_dy_xhat);
    float* dgp = dgamma->data<float>();
    float* dbp = dbeta->data<float>();
    for (int64_t c = 0; c < nc; ++c) {
      dbp[c] = static_cast<float>(sum_dy[c]);
      dgp[c] = static_cast<float>(sum_dy_xhat[c]);
    }
    if (g.rows == 0) return;
    // dx = k (dy - mean_dy - xhat mean_dy_xhat), k = gamma inv_std.
    float* k = reinterpret_cast<float*>(acc);  // 3 nc floats fit in 2 nc doubles
    float* mean_dy = k + nc;
    float* mean_dyx = mean_dy + nc;
    const float* gp = gamma.data<float>();
    for (int64_t c = 0; c < nc; ++c) {
      k[c] = gp[c] * ip[c];
      mean_dy[c] = dbp[c] / g.rows;
      mean_dyx[c] = dgp[c] / g.rows;
    }
    float* dxp = dx->data<float>();
    ParallelFor(ctx, g.rows, 4.0 * nc, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* dr = dyp + r * nc;
        const float* xr = xp + r * nc;
        float* out = dxp + r * nc;
        for (int64_t c = 0; c < nc; ++c) {
          const float xhat = (xr[c] - mp[c]) * ip[c];
          out[c] = k[c] * (dr[c] - mean_dy[c] - xhat * mean_dyx[c]);
        }
      }
    });
  }
};

struct BatchNormInference {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& x, const Tensor& gamma,
                  const Tensor& beta, const Tensor& mean, const Tensor& var, float epsilon, Tensor* y) {
    const int64_t nc = g.channels;
    absl::StatusOr<Tensor> t = ctx->allocate_temp(DType::kFloat32, TensorShape{2 * std::max<int64_t>(nc, 1)});
    OP_REQUIRES_OK(ctx, t.status());
    float* scale = t->data<float>();
    float* shift = scale + nc;
    const float* gp = gamma.data<float>();
    const float* bp = beta.data<float>();
    const float* mp = mean.data<float>();
    const float* vp = var.data<float>();
    for (int64_t c = 0; c < nc; ++c) {
      scale[c] = gp[c] / std::sqrt(vp[c] + epsilon);
      shift[c] = bp[c] - mp[c] * scale[c];
    }
    ScaleShiftRows(ctx, g, x.data<float>(), scale, shift, y->data<float>());
  }
};

struct GlobalAvgPool {
  static void Run(OpKernelContext* ctx, const GlobalPoolGeometry& g, const Tensor& x, Tensor* out) {
    const float* xp = x.data<float>();
    float* op = out->data<float>();
    const float inv = 1.0f / static_cast<float>(g.hw);
    ParallelFor(ctx, g.n, double(g.hw) * g.c, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        float* o = op + n * g.c;
        std::fill(o, o + g.c, 0.0f);
        const float* img = xp + n * g.hw * g.c;
        for (int64_t p = 0; p < g.hw; ++p) {
          const float* px = img + p * g.c;
          for (int64_t c = 0; c < g.c; ++c) o[c] += px[c];
        }
        for (int64_t c = 0; c < g.c; ++c) o[c] *= inv;
      }
    });
  }
};

struct GlobalAvgPoolGrad {
  static void Run(OpKernelContext* ctx, const GlobalPoolGeometry& g, const Tensor& grad, Tensor* dx) {
    const float* gp = grad.data<float>();
    float* dp = dx->data<float>();
    const float inv = 1.0f / static_cast<float>(g.hw);
    ParallelFor(ctx, g.n, double(g.hw) * g.c, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        const float* gn = gp + n * g.c;
        float* img = dp + n * g.hw * g.c;
        for (int64_t p = 0; p < g.hw; ++p) {
          float* px = img + p * g.c;
          for (int64_t c = 0; c < g.c; ++c) px[c] = gn[c] * inv;
        }
      }
    });
  }
};

WEFT_REGISTER_KERNEL("BatchNorm", "CPU", kernels::BatchNormKernel<BatchNorm>);
WEFT_REGISTER_KERNEL("BatchNormGrad", "CPU", kernels::BatchNormGradKernel<BatchNormGrad>);
WEFT_REGISTER_KERNEL("BatchNormInference", "CPU", kernels::BatchNormInferenceKernel<BatchNormInference>);
WEFT_REGISTER_KERNEL("GlobalAvgPool", "CPU", kernels::GlobalAvgPoolKernel<GlobalAvgPool>);
WEFT_REGISTER_KERNEL("GlobalAvgPoolGrad", "CPU", kernels::GlobalAvgPoolGradKernel<GlobalAvgPoolGrad>);

}  // namespace
}  // namespace cpu
}  // namespace weft
