// CPU MaxPool and MaxPoolGrad on NHWC tensors. The inner loops run over the
// channels, which are contiguous, so they vectorise. Padding (SAME) never
// wins a maximum: padded positions are skipped, not read as zeros.
// Attributes, geometry checks and the output are the shared skeleton's
// (runtime/kernels/window_kernels.h).
#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "graph/ops/window_geometry.h"
#include "runtime/device.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/window_checks.h"
#include "runtime/kernels/window_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

using kernels::PoolGeometry;

// best[c] = max(best[c], s[c]). Separate functions with restrict-qualified
// parameters so gcc vectorises the channel loops without alias checks.
void MaxInto(const float* __restrict s, float* __restrict best, int64_t nc) {
  for (int64_t c = 0; c < nc; ++c) best[c] = s[c] > best[c] ? s[c] : best[c];
}

// v where mask is all ones, +0 where it is zero. Bit masking instead of a
// conditional keeps the loop below free of branches gcc will not vectorise
// (a conditional float add might trap).
inline float KeepIf(float v, uint32_t mask) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits &= mask;
  std::memcpy(&v, &bits, sizeof bits);
  return v;
}

// Where s[c] holds the window maximum and the channel's gradient is not yet
// routed, moves it into d[c].
void RouteGradient(const float* __restrict s, const float* __restrict best, float* __restrict rest,
                   float* __restrict d, int64_t nc) {
  for (int64_t c = 0; c < nc; ++c) {
    const uint32_t hit = 0u - static_cast<uint32_t>(s[c] == best[c]);
    const float r = rest[c];
    d[c] += KeepIf(r, hit);
    rest[c] = KeepIf(r, ~hit);
  }
}


struct MaxPool {
  static void Run(OpKernelContext* ctx, const PoolGeometry& g, const Tensor& x, Tensor* out) {
    const float* xp = x.data<float>();
    float* yp = out->data<float>();
    ParallelFor(ctx, g.n, double(g.ho) * g.wo * g.c * g.k * g.k, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        const float* img = xp + n * g.h * g.w * g.c;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          for (int64_t ow = 0; ow < g.wo; ++ow) {
            float* o = yp + ((n * g.ho + oh) * g.wo + ow) * g.c;
            std::fill(o, o + g.c, -std::numeric_limits<float>::infinity());
            int64_t i0, i1, j0, j1;
            g.Window(oh, ow, &i0, &i1, &j0, &j1);
            for (int64_t i = i0; i < i1; ++i) {
              for (int64_t j = j0; j < j1; ++j) MaxInto(img + (i * g.w + j) * g.c, o, g.c);
            }
          }
        }
      }
    });
  }
};

// (x, y, g) -> dx. The maximum is recomputed from x (y is only checked for
// its shape), and each window's gradient goes to the first position, in
// row-major window order, that holds it. Both passes over a window read and
// write whole channel vectors, so there is no per-channel argmax to scatter.
struct MaxPoolGrad {
  static void Run(OpKernelContext* ctx, const PoolGeometry& g, const Tensor& x, const Tensor& grad, Tensor* out) {
    float* dx = out->data<float>();
    std::fill(dx, dx + out->NumElements(), 0.0f);
    const float* xp = x.data<float>();
    const float* gp = grad.data<float>();
    const int64_t nc = g.c;
    FirstError errors;
    ParallelFor(ctx, g.n, double(g.ho) * g.wo * g.c * g.k * g.k * 2, [&](int64_t begin, int64_t end) {
      // best: the window's maximum per channel; rest: gradient not yet routed.
      // 2 * nc fits: x, with nc floats per pixel, was allocated.
      absl::StatusOr<Tensor> scratch_or = ctx->allocate_temp(DType::kFloat32, TensorShape{2 * nc});
      if (!scratch_or.ok()) {
        errors.Update(scratch_or.status());
        return;
      }
      Tensor& scratch = *scratch_or;
      float* best = scratch.data<float>();
      float* rest = best + nc;
      for (int64_t n = begin; n < end; ++n) {
        const float* img = xp + n * g.h * g.w * nc;
        float* dimg = dx + n * g.h * g.w * nc;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          for (int64_t ow = 0; ow < g.wo; ++ow) {
            int64_t i0, i1, j0, j1;
            g.Window(oh, ow, &i0, &i1, &j0, &j1);
            std::fill(best, best + nc, -std::numeric_limits<float>::infinity());
            for (int64_t i = i0; i < i1; ++i) {
              for (int64_t j = j0; j < j1; ++j) MaxInto(img + (i * g.w + j) * nc, best, nc);
            }
            const float* go = gp + ((n * g.ho + oh) * g.wo + ow) * nc;
            std::copy(go, go + nc, rest);
            for (int64_t i = i0; i < i1; ++i) {
              for (int64_t j = j0; j < j1; ++j) {
                const int64_t pos = (i * g.w + j) * nc;
                RouteGradient(img + pos, best, rest, dimg + pos, nc);
              }
            }
          }
        }
      }
    });
    OP_REQUIRES_OK(ctx, errors.status());
  }
};

WEFT_REGISTER_KERNEL("MaxPool", "CPU", kernels::MaxPoolKernel<MaxPool>);
WEFT_REGISTER_KERNEL("MaxPoolGrad", "CPU", kernels::MaxPoolGradKernel<MaxPoolGrad>);

}  // namespace
}  // namespace cpu
}  // namespace weft
