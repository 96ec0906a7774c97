// CPU kernels for LayerNorm and LayerNormGrad. Each row of x (its last axis)
// is contiguous and normalised on its own, so the forward pass and dx are
// parallel over rows; each row's sums accumulate in double, and the variance
// is two-pass (squares about the row's mean, as stored in float), so a large
// offset cannot cancel as in E[x^2] - E[x]^2. dgamma and dbeta sum over the
// rows, in row order in double, parallel over channels. Checks, attributes
// and outputs are the shared skeleton's (runtime/kernels/layer_norm_kernels.h).
#include <cmath>
#include <vector>

#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/layer_norm_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

using kernels::NormGeometry;

struct LayerNorm {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& x, const Tensor& gamma,
                  const Tensor& beta, float epsilon, Tensor* y, Tensor* mean, Tensor* inv_std) {
    const int64_t nc = g.channels;
    const float* xp = x.data<float>();
    const float* gp = gamma.data<float>();
    const float* bp = beta.data<float>();
    float* yp = y->data<float>();
    float* mp = mean->data<float>();
    float* ip = inv_std->data<float>();
    ParallelFor(ctx, g.rows, 6.0 * nc, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* xr = xp + r * nc;
        double sum = 0.0;
        for (int64_t c = 0; c < nc; ++c) sum += xr[c];
        const float m = static_cast<float>(sum / nc);
        double m2 = 0.0;
        for (int64_t c = 0; c < nc; ++c) {
          const double d = xr[c] - m;
          m2 += d * d;
        }
        const float is = static_cast<float>(1.0 / std::sqrt(m2 / nc + epsilon));
        mp[r] = m;
        ip[r] = is;
        float* yr = yp + r * nc;
        for (int64_t c = 0; c < nc; ++c) {
          const float xhat = (xr[c] - m) * is;
          yr[c] = xhat * gp[c] + bp[c];
        }
      }
    });
  }
};

// With xhat = (x - mean_row) inv_std_row, g = dy gamma and C channels:
//   dbeta = sum over rows of dy, dgamma = sum over rows of dy xhat,
//   dx = inv_std_row (g - sum_row(g) / C - xhat sum_row(g xhat) / C).
struct LayerNormGrad {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& dy, const Tensor& x,
                  const Tensor& gamma, const Tensor& mean, const Tensor& inv_std, Tensor* dx, Tensor* dgamma,
                  Tensor* dbeta) {
    const int64_t nc = g.channels;
    const float* dyp = dy.data<float>();
    const float* xp = x.data<float>();
    const float* gp = gamma.data<float>();
    const float* mp = mean.data<float>();
    const float* ip = inv_std.data<float>();
    float* dxp = dx->data<float>();
    ParallelFor(ctx, g.rows, 8.0 * nc, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* dr = dyp + r * nc;
        const float* xr = xp + r * nc;
        const float m = mp[r], is = ip[r];
        double sum_g = 0.0, sum_gx = 0.0;
        for (int64_t c = 0; c < nc; ++c) {
          const float gc = dr[c] * gp[c];
          sum_g += gc;
          sum_gx += static_cast<double>(gc) * ((xr[c] - m) * is);
        }
        const float mean_g = static_cast<float>(sum_g / nc);
        const float mean_gx = static_cast<float>(sum_gx / nc);
        float* out = dxp + r * nc;
        for (int64_t c = 0; c < nc; ++c) {
          const float xhat = (xr[c] - m) * is;
          out[c] = is * (dr[c] * gp[c] - mean_g - xhat * mean_gx);
        }
      }
    });
    float* dgp = dgamma->data<float>();
    float* dbp = dbeta->data<float>();
    // Each block of channels walks every row in order: the sums, and so the
    // result, do not depend on how the channels are split.
    ParallelFor(ctx, nc, 4.0 * g.rows, [&](int64_t begin, int64_t end) {
      const int64_t n = end - begin;
      std::vector<double> acc(2 * n, 0.0);
      double* sum_dy = acc.data();
      double* sum_dyx = sum_dy + n;
      for (int64_t r = 0; r < g.rows; ++r) {
        const float* dr = dyp + r * nc + begin;
        const float* xr = xp + r * nc + begin;
        const float m = mp[r], is = ip[r];
        for (int64_t c = 0; c < n; ++c) {
          sum_dy[c] += dr[c];
          sum_dyx[c] += static_cast<double>(dr[c]) * ((xr[c] - m) * is);
        }
      }
      for (int64_t c = 0; c < n; ++c) {
        dbp[begin + c] = static_cast<float>(sum_dy[c]);
        dgp[begin + c] = static_cast<float>(sum_dyx[c]);
      }
    });
  }
};

WEFT_REGISTER_KERNEL("LayerNorm", "CPU", kernels::LayerNormKernel<LayerNorm>);
WEFT_REGISTER_KERNEL("LayerNormGrad", "CPU", kernels::LayerNormGradKernel<LayerNormGrad>);

}  // namespace
}  // namespace cpu
}  // namespace weft
