// CPU AvgPool (+Grad) on NHWC tensors and Concat (+Grad) along the last
// axis. A window's mean is over its in-image positions only (SAME padding is
// never counted), as in Keras and TensorFlow. The inner loops run over the
// contiguous channels. Attributes, checks and outputs are the shared
// skeletons' (runtime/kernels/window_kernels.h, concat_kernels.h).
#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/kernels/concat_kernels.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/window_checks.h"
#include "runtime/kernels/window_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

using kernels::ConcatLayout;
using kernels::PoolGeometry;

void AddInto(const float* __restrict s, float* __restrict acc, int64_t nc) {
  for (int64_t c = 0; c < nc; ++c) acc[c] += s[c];
}

void ScaleAddInto(const float* __restrict s, float scale, float* __restrict acc, int64_t nc) {
  for (int64_t c = 0; c < nc; ++c) acc[c] += s[c] * scale;
}

struct AvgPool {
  static void Run(OpKernelContext* ctx, const PoolGeometry& g, const Tensor& x, Tensor* out) {
    const float* xp = x.data<float>();
    float* yp = out->data<float>();
    ParallelFor(ctx, g.n, double(g.ho) * g.wo * g.c * g.k * g.k, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        const float* img = xp + n * g.h * g.w * g.c;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          for (int64_t ow = 0; ow < g.wo; ++ow) {
            float* o = yp + ((n * g.ho + oh) * g.wo + ow) * g.c;
            std::fill(o, o + g.c, 0.0f);
            int64_t i0, i1, j0, j1;
            g.Window(oh, ow, &i0, &i1, &j0, &j1);
            for (int64_t i = i0; i < i1; ++i) {
              for (int64_t j = j0; j < j1; ++j) AddInto(img + (i * g.w + j) * g.c, o, g.c);
            }
            // A window always holds an in-image position: SAME pads less
            // than a window, VALID not at all.
            const float inv = 1.0f / static_cast<float>((i1 - i0) * (j1 - j0));
            for (int64_t c = 0; c < g.c; ++c) o[c] *= inv;
          }
        }
      }
    });
  }
};

// (x, g) -> dx: each window's gradient divided among its in-image positions.
struct AvgPoolGrad {
  static void Run(OpKernelContext* ctx, const PoolGeometry& g, const Tensor& grad, Tensor* out) {
    float* dx = out->data<float>();
    std::fill(dx, dx + out->NumElements(), 0.0f);
    const float* gp = grad.data<float>();
    ParallelFor(ctx, g.n, double(g.ho) * g.wo * g.c * g.k * g.k, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        float* dimg = dx + n * g.h * g.w * g.c;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          for (int64_t ow = 0; ow < g.wo; ++ow) {
            int64_t i0, i1, j0, j1;
            g.Window(oh, ow, &i0, &i1, &j0, &j1);
            const float inv = 1.0f / static_cast<float>((i1 - i0) * (j1 - j0));
            const float* go = gp + ((n * g.ho + oh) * g.wo + ow) * g.c;
            for (int64_t i = i0; i < i1; ++i) {
              for (int64_t j = j0; j < j1; ++j) ScaleAddInto(go, inv, dimg + (i * g.w + j) * g.c, g.c);
            }
          }
        }
      }
    });
  }
};

struct Concat {
  static void Run(OpKernelContext* ctx, const ConcatLayout& l, Tensor* out) {
    float* y = out->data<float>();
    for (size_t k = 0; k < l.widths.size(); ++k) {
      const int64_t w = l.widths[k];
      if (w == 0) continue;
      const float* x = ctx->input(static_cast<int>(k)).data<float>();
      for (int64_t r = 0; r < l.rows; ++r) std::memcpy(y + r * l.total + l.offsets[k], x + r * w, w * sizeof(float));
    }
  }
};

struct ConcatGrad {
  static void Run(OpKernelContext*, const ConcatLayout& l, const Tensor& grad, const std::vector<Tensor*>& outs) {
    const float* gp = grad.data<float>();
    for (size_t k = 0; k < outs.size(); ++k) {
      if (outs[k] == nullptr) continue;
      const int64_t w = l.widths[k];
      float* dx = outs[k]->data<float>();
      for (int64_t r = 0; r < l.rows; ++r) std::memcpy(dx + r * w, gp + r * l.total + l.offsets[k], w * sizeof(float));
    }
  }
};

WEFT_REGISTER_KERNEL("AvgPool", "CPU", kernels::MaxPoolKernel<AvgPool>);
WEFT_REGISTER_KERNEL("AvgPoolGrad", "CPU", kernels::AvgPoolGradKernel<AvgPoolGrad>);
WEFT_REGISTER_KERNEL("Concat", "CPU", kernels::ConcatKernel<Concat>);
WEFT_REGISTER_KERNEL("ConcatGrad", "CPU", kernels::ConcatGradKernel<ConcatGrad>);

}  // namespace
}  // namespace cpu
}  // namespace weft
