// CPU Conv2D and its backprops (NHWC input, HWIO filter) as im2col + Eigen
// GEMM.
//
// The patch matrix of a chunk of images ([images * Ho * Wo, KH * KW * Cin])
// is built in a scratch tensor from the device allocator, so a warm step
// reuses cached blocks; chunks keep it around a megabyte so it stays in
// cache while the GEMM packs it. A 1x1, stride-1 convolution is a plain
// GEMM on the input and needs no patches. Attributes, geometry checks and
// the output are the shared skeleton's (runtime/kernels/window_kernels.h).
//
//   forward:        Y[rows, Cout]  = patches * F[K, Cout]
//   input grad:     dpatches       = G * F^T, scattered back (col2im)
//   filter grad:    dF             = sum over chunks of patches^T * G
#include <algorithm>
#include <cstring>

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

using kernels::ConvGeometry;

// Target size of a chunk's patch matrix, in floats.
constexpr int64_t kScratchFloats = int64_t{1} << 18;

// Images per chunk of the patch matrix.
int64_t ImagesPerChunk(const ConvGeometry& g) {
  return std::max<int64_t>(1, kScratchFloats / std::max<int64_t>(1, g.patches() * g.k()));
}

// Writes the patches of images [n0, n1) as rows of `cols` ([.., K]).
void Im2Col(const ConvGeometry& g, const float* x, int64_t n0, int64_t n1, float* cols) {
  const int64_t k = g.k();
  const int64_t row_len = g.kw * g.cin;
  for (int64_t n = n0; n < n1; ++n) {
    const float* img = x + n * g.h * g.w * g.cin;
    for (int64_t oh = 0; oh < g.ho; ++oh) {
      for (int64_t ow = 0; ow < g.wo; ++ow) {
        float* dst = cols + ((n - n0) * g.patches() + oh * g.wo + ow) * k;
        const int64_t ih0 = oh * g.stride - g.pad_top;
        const int64_t iw0 = ow * g.stride - g.pad_left;
        for (int64_t i = 0; i < g.kh; ++i, dst += row_len) {
          const int64_t ih = ih0 + i;
          if (ih < 0 || ih >= g.h) {
            std::memset(dst, 0, row_len * sizeof(float));
            continue;
          }
          const float* src = img + (ih * g.w) * g.cin;
          if (iw0 >= 0 && iw0 + g.kw <= g.w) {
            std::memcpy(dst, src + iw0 * g.cin, row_len * sizeof(float));
            continue;
          }
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t iw = iw0 + j;
            float* d = dst + j * g.cin;
            if (iw < 0 || iw >= g.w) {
              std::memset(d, 0, g.cin * sizeof(float));
            } else {
              std::memcpy(d, src + iw * g.cin, g.cin * sizeof(float));
            }
          }
        }
      }
    }
  }
}

// Adds the patch rows of images [n0, n1) back into dx (the adjoint of Im2Col).
void Col2Im(const ConvGeometry& g, const float* cols, int64_t n0, int64_t n1, float* dx) {
  const int64_t k = g.k();
  for (int64_t n = n0; n < n1; ++n) {
    float* img = dx + n * g.h * g.w * g.cin;
    for (int64_t oh = 0; oh < g.ho; ++oh) {
      for (int64_t ow = 0; ow < g.wo; ++ow) {
        const float* src = cols + ((n - n0) * g.patches() + oh * g.wo + ow) * k;
        const int64_t ih0 = oh * g.stride - g.pad_top;
        const int64_t iw0 = ow * g.stride - g.pad_left;
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t ih = ih0 + i;
          if (ih < 0 || ih >= g.h) continue;
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t iw = iw0 + j;
            if (iw < 0 || iw >= g.w) continue;
            const float* s = src + (i * g.kw + j) * g.cin;
            float* d = img + (ih * g.w + iw) * g.cin;
            for (int64_t c = 0; c < g.cin; ++c) d[c] += s[c];
          }
        }
      }
    }
  }
}

// Through allocate_temp, which never throws: the size follows the input's
// geometry, so a request can make it large.
absl::StatusOr<Tensor> Scratch(OpKernelContext* ctx, int64_t floats) {
  return ctx->allocate_temp(DType::kFloat32, TensorShape{floats});
}


struct Conv2D {
  static void Run(OpKernelContext* ctx, const ConvGeometry& g, Tensor* out) {
    const float* x = ctx->input(0).data<float>();
    ConstMatrixMap f(ctx->input(1).data<float>(), g.k(), g.cout);
    float* y = out->data<float>();
    if (g.IsPointwise()) {
      MatrixMap ym(y, g.n * g.patches(), g.cout);
      ym.noalias() = ConstMatrixMap(x, g.n * g.patches(), g.cin) * f;
      return;
    }
    const int64_t per = ImagesPerChunk(g);
    const int64_t chunks = (g.n + per - 1) / per;
    FirstError errors;
    ParallelFor(ctx, chunks, 2.0 * per * g.patches() * g.k() * g.cout, [&](int64_t begin, int64_t end) {
      absl::StatusOr<Tensor> scratch_or = Scratch(ctx, per * g.patches() * g.k());
      if (!scratch_or.ok()) {
        errors.Update(scratch_or.status());
        return;
      }
      Tensor& scratch = *scratch_or;
      for (int64_t ch = begin; ch < end; ++ch) {
        const int64_t n0 = ch * per, n1 = std::min(g.n, n0 + per);
        const int64_t rows = (n1 - n0) * g.patches();
        Im2Col(g, x, n0, n1, scratch.data<float>());
        MatrixMap ym(y + n0 * g.patches() * g.cout, rows, g.cout);
        ym.noalias() = ConstMatrixMap(scratch.data<float>(), rows, g.k()) * f;
      }
    });
    OP_REQUIRES_OK(ctx, errors.status());
  }
};

struct Conv2DBackpropInput {
  static void Run(OpKernelContext* ctx, const ConvGeometry& g, Tensor* out) {
    float* dx = out->data<float>();
    ConstMatrixMap f(ctx->input(1).data<float>(), g.k(), g.cout);
    const float* grad = ctx->input(2).data<float>();
    if (g.IsPointwise()) {
      MatrixMap dxm(dx, g.n * g.patches(), g.cin);
      dxm.noalias() = ConstMatrixMap(grad, g.n * g.patches(), g.cout) * f.transpose();
      return;
    }
    std::fill(dx, dx + out->NumElements(), 0.0f);
    if (g.patches() == 0) return;
    const int64_t per = ImagesPerChunk(g);
    const int64_t chunks = (g.n + per - 1) / per;
    FirstError errors;
    ParallelFor(ctx, chunks, 2.0 * per * g.patches() * g.k() * g.cout, [&](int64_t begin, int64_t end) {
      absl::StatusOr<Tensor> scratch_or = Scratch(ctx, per * g.patches() * g.k());
      if (!scratch_or.ok()) {
        errors.Update(scratch_or.status());
        return;
      }
      Tensor& scratch = *scratch_or;
      for (int64_t ch = begin; ch < end; ++ch) {
        const int64_t n0 = ch * per, n1 = std::min(g.n, n0 + per);
        const int64_t rows = (n1 - n0) * g.patches();
        MatrixMap cols(scratch.data<float>(), rows, g.k());
        cols.noalias() = ConstMatrixMap(grad + n0 * g.patches() * g.cout, rows, g.cout) * f.transpose();
        Col2Im(g, scratch.data<float>(), n0, n1, dx);
      }
    });
    OP_REQUIRES_OK(ctx, errors.status());
  }
};

struct Conv2DBackpropFilter {
  static void Run(OpKernelContext* ctx, const ConvGeometry& g, Tensor* out) {
    MatrixMap df(out->data<float>(), g.k(), g.cout);
    const float* x = ctx->input(0).data<float>();
    const float* grad = ctx->input(2).data<float>();
    if (g.IsPointwise()) {
      df.noalias() = ConstMatrixMap(x, g.n * g.patches(), g.cin).transpose() *
                     ConstMatrixMap(grad, g.n * g.patches(), g.cout);
      return;
    }
    df.setZero();
    if (g.patches() == 0) return;
    const int64_t per = ImagesPerChunk(g);
    absl::StatusOr<Tensor> scratch_or = Scratch(ctx, per * g.patches() * g.k());
    OP_REQUIRES_OK(ctx, scratch_or.status());
    Tensor& scratch = *scratch_or;
    for (int64_t n0 = 0; n0 < g.n; n0 += per) {
      const int64_t n1 = std::min(g.n, n0 + per);
      const int64_t rows = (n1 - n0) * g.patches();
      Im2Col(g, x, n0, n1, scratch.data<float>());
      df.noalias() += ConstMatrixMap(scratch.data<float>(), rows, g.k()).transpose() *
                      ConstMatrixMap(grad + n0 * g.patches() * g.cout, rows, g.cout);
    }
  }
};

// Aliases: the macro cannot take a template argument list with a comma.
using Conv2DKernel = kernels::ConvKernel<kernels::ConvOp::kForward, Conv2D>;
using Conv2DBackpropInputKernel = kernels::ConvKernel<kernels::ConvOp::kBackpropInput, Conv2DBackpropInput>;
using Conv2DBackpropFilterKernel = kernels::ConvKernel<kernels::ConvOp::kBackpropFilter, Conv2DBackpropFilter>;

WEFT_REGISTER_KERNEL("Conv2D", "CPU", Conv2DKernel);
WEFT_REGISTER_KERNEL("Conv2DBackpropInput", "CPU", Conv2DBackpropInputKernel);
WEFT_REGISTER_KERNEL("Conv2DBackpropFilter", "CPU", Conv2DBackpropFilterKernel);

}  // namespace
}  // namespace cpu
}  // namespace weft
