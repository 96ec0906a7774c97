// Window kernels on NHWC tensors: im2col and its adjoint for the
// convolutions (whose GEMMs run in cuBLAS), MaxPool and MaxPoolGrad.
//
// Col2Im and MaxPoolGrad gather: one thread per input element sums what the
// windows covering it contribute, in the order the CPU adds them, so they
// need no atomics, no zeroing launch, and are deterministic.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/cuda/launch_util.cuh"

namespace weft {
namespace gpu_kernels {
namespace {

// Geometry in int64 on the device; passed by value.
__global__ void Im2ColKernel(WindowGeometry g, const float* __restrict__ x, int64_t n0, int64_t total,
                             float* __restrict__ cols) {
  const int64_t k = g.kh * g.kw * g.c;
  const int64_t patches = g.ho * g.wo;
  WEFT_GRID_STRIDE(idx, total) {
    const int64_t col = idx % k;
    const int64_t row = idx / k;
    const int64_t c = col % g.c;
    const int64_t j = (col / g.c) % g.kw;
    const int64_t i = col / (g.c * g.kw);
    const int64_t n = n0 + row / patches;
    const int64_t p = row % patches;
    const int64_t ih = (p / g.wo) * g.stride - g.pad_top + i;
    const int64_t iw = (p % g.wo) * g.stride - g.pad_left + j;
    float v = 0.0f;
    if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) v = x[((n * g.h + ih) * g.w + iw) * g.c + c];
    cols[idx] = v;
  }
}

__global__ void Col2ImKernel(WindowGeometry g, const float* __restrict__ cols, int64_t n0, int64_t total,
                             float* __restrict__ dx) {
  const int64_t k = g.kh * g.kw * g.c;
  const int64_t patches = g.ho * g.wo;
  WEFT_GRID_STRIDE(idx, total) {
    const int64_t c = idx % g.c;
    const int64_t iw = (idx / g.c) % g.w;
    const int64_t ih = (idx / (g.c * g.w)) % g.h;
    const int64_t nl = idx / (g.c * g.w * g.h);  // image within the chunk
    float s = 0.0f;
    // Window rows i from last to first visit outputs oh in increasing order.
    for (int64_t i = g.kh - 1; i >= 0; --i) {
      const int64_t th = ih + g.pad_top - i;
      if (th < 0 || th % g.stride != 0) continue;
      const int64_t oh = th / g.stride;
      if (oh >= g.ho) continue;
      for (int64_t j = g.kw - 1; j >= 0; --j) {
        const int64_t tw = iw + g.pad_left - j;
        if (tw < 0 || tw % g.stride != 0) continue;
        const int64_t ow = tw / g.stride;
        if (ow >= g.wo) continue;
        s += cols[(nl * patches + oh * g.wo + ow) * k + (i * g.kw + j) * g.c + c];
      }
    }
    dx[n0 * g.h * g.w * g.c + idx] = s;
  }
}

__device__ __forceinline__ void Window(const WindowGeometry& g, int64_t oh, int64_t ow, int64_t* i0, int64_t* i1,
                                       int64_t* j0, int64_t* j1) {
  const int64_t ih = oh * g.stride - g.pad_top, iw = ow * g.stride - g.pad_left;
  *i0 = ih > 0 ? ih : 0;
  *i1 = ih + g.kh < g.h ? ih + g.kh : g.h;
  *j0 = iw > 0 ? iw : 0;
  *j1 = iw + g.kw < g.w ? iw + g.kw : g.w;
}

__global__ void MaxPoolKernel(WindowGeometry g, const float* __restrict__ x, float* __restrict__ y, int64_t total) {
  WEFT_GRID_STRIDE(idx, total) {
    const int64_t c = idx % g.c;
    const int64_t ow = (idx / g.c) % g.wo;
    const int64_t oh = (idx / (g.c * g.wo)) % g.ho;
    const int64_t n = idx / (g.c * g.wo * g.ho);
    int64_t i0, i1, j0, j1;
    Window(g, oh, ow, &i0, &i1, &j0, &j1);
    const float* img = x + n * g.h * g.w * g.c + c;
    float best = -INFINITY;
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t j = j0; j < j1; ++j) {
        const float v = img[(i * g.w + j) * g.c];
        best = v > best ? v : best;
      }
    }
    y[idx] = best;
  }
}

// The position (i * w + j) in window (oh, ow) that the CPU routes its
// gradient to: the first holding the maximum; -1 when none does (all NaN).
__device__ int64_t RoutedPosition(const WindowGeometry& g, const float* img, int64_t oh, int64_t ow) {
  int64_t i0, i1, j0, j1;
  Window(g, oh, ow, &i0, &i1, &j0, &j1);
  float best = -INFINITY;
  int64_t pos = -1;
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t j = j0; j < j1; ++j) {
      const float v = img[(i * g.w + j) * g.c];
      if (v > best) {
        best = v;
        pos = i * g.w + j;
      }
    }
  }
  if (pos >= 0) return pos;
  // The maximum is -inf (or every value NaN): the first -inf, if any.
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t j = j0; j < j1; ++j) {
      if (img[(i * g.w + j) * g.c] == best) return i * g.w + j;
    }
  }
  return -1;
}

__global__ void MaxPoolGradKernel(WindowGeometry g, const float* __restrict__ x, const float* __restrict__ grad,
                                  float* __restrict__ dx, int64_t total) {
  WEFT_GRID_STRIDE(idx, total) {
    const int64_t c = idx % g.c;
    const int64_t iw = (idx / g.c) % g.w;
    const int64_t ih = (idx / (g.c * g.w)) % g.h;
    const int64_t n = idx / (g.c * g.w * g.h);
    const float* img = x + n * g.h * g.w * g.c + c;
    const float* gimg = grad + n * g.ho * g.wo * g.c + c;
    // Outputs whose window covers (ih, iw): oh * stride - pad_top in (ih - k, ih].
    const int64_t th = ih + g.pad_top, tw = iw + g.pad_left;
    const int64_t oh0 = th - g.kh + 1 <= 0 ? 0 : (th - g.kh + 1 + g.stride - 1) / g.stride;
    const int64_t ow0 = tw - g.kw + 1 <= 0 ? 0 : (tw - g.kw + 1 + g.stride - 1) / g.stride;
    const int64_t oh1 = th / g.stride < g.ho - 1 ? th / g.stride : g.ho - 1;
    const int64_t ow1 = tw / g.stride < g.wo - 1 ? tw / g.stride : g.wo - 1;
    const int64_t here = ih * g.w + iw;
    float s = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        if (RoutedPosition(g, img, oh, ow) == here) s += gimg[(oh * g.wo + ow) * g.c];
      }
    }
    dx[idx] = s;
  }
}

}  // namespace

cudaError_t LaunchIm2Col(const WindowGeometry& g, const float* x, int64_t n0, int64_t n1, float* cols,
                         cudaStream_t stream) {
  const int64_t total = (n1 - n0) * g.ho * g.wo * g.kh * g.kw * g.c;
  if (total <= 0) return cudaSuccess;
  Im2ColKernel<<<BlocksFor(total), kThreads, 0, stream>>>(g, x, n0, total, cols);
  return cudaGetLastError();
}

cudaError_t LaunchCol2Im(const WindowGeometry& g, const float* cols, int64_t n0, int64_t n1, float* dx,
                         cudaStream_t stream) {
  const int64_t total = (n1 - n0) * g.h * g.w * g.c;
  if (total <= 0) return cudaSuccess;
  Col2ImKernel<<<BlocksFor(total), kThreads, 0, stream>>>(g, cols, n0, total, dx);
  return cudaGetLastError();
}

cudaError_t LaunchMaxPool(const WindowGeometry& g, const float* x, float* y, cudaStream_t stream) {
  const int64_t total = g.n * g.ho * g.wo * g.c;
  if (total <= 0) return cudaSuccess;
  MaxPoolKernel<<<BlocksFor(total), kThreads, 0, stream>>>(g, x, y, total);
  return cudaGetLastError();
}

cudaError_t LaunchMaxPoolGrad(const WindowGeometry& g, const float* x, const float* grad, float* dx,
                              cudaStream_t stream) {
  const int64_t total = g.n * g.h * g.w * g.c;
  if (total <= 0) return cudaSuccess;
  MaxPoolGradKernel<<<BlocksFor(total), kThreads, 0, stream>>>(g, x, grad, dx, total);
  return cudaGetLastError();
}

}  // namespace gpu_kernels
}  // namespace weft
