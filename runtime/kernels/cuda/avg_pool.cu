// AvgPool and AvgPoolGrad on NHWC tensors. A window's mean is over its
// in-image positions only, as on the CPU (cpu/join_pool_kernels.cc).
// AvgPoolGrad gathers: one thread per input element sums the shares of the
// windows covering it, so it needs no atomics and is deterministic.
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/cuda/launch_util.cuh"

namespace weft {
namespace gpu_kernels {
namespace {

// The number of in-image positions of output (oh, ow)'s window; rows
// [i0, i1) and cols [j0, j1) when the pointers are given.
__device__ __forceinline__ int64_t WindowCount(const WindowGeometry& g, int64_t oh, int64_t ow, int64_t* i0,
                                               int64_t* i1, int64_t* j0, int64_t* j1) {
  const int64_t ih = oh * g.stride - g.pad_top, iw = ow * g.stride - g.pad_left;
  *i0 = ih > 0 ? ih : 0;
  *i1 = ih + g.kh < g.h ? ih + g.kh : g.h;
  *j0 = iw > 0 ? iw : 0;
  *j1 = iw + g.kw < g.w ? iw + g.kw : g.w;
  return (*i1 - *i0) * (*j1 - *j0);
}

__global__ void AvgPoolKernel(WindowGeometry g, const float* __restrict__ x, float* __restrict__ y, int64_t total) {
  WEFT_GRID_STRIDE(idx, total) {
    const int64_t c = idx % g.c;
    const int64_t ow = (idx / g.c) % g.wo;
    const int64_t oh = (idx / (g.c * g.wo)) % g.ho;
    const int64_t n = idx / (g.c * g.wo * g.ho);
    int64_t i0, i1, j0, j1;
    const int64_t count = WindowCount(g, oh, ow, &i0, &i1, &j0, &j1);
    const float* img = x + n * g.h * g.w * g.c + c;
    float s = 0.0f;
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t j = j0; j < j1; ++j) s += img[(i * g.w + j) * g.c];
    }
    y[idx] = s * (1.0f / static_cast<float>(count));
  }
}

__global__ void AvgPoolGradKernel(WindowGeometry g, const float* __restrict__ grad, float* __restrict__ dx,
                                  int64_t total) {
  WEFT_GRID_STRIDE(idx, total) {
    const int64_t c = idx % g.c;
    const int64_t iw = (idx / g.c) % g.w;
    const int64_t ih = (idx / (g.c * g.w)) % g.h;
    const int64_t n = idx / (g.c * g.w * g.h);
    const float* gimg = grad + n * g.ho * g.wo * g.c + c;
    // Outputs whose window covers (ih, iw): oh * stride - pad_top in (ih - k, ih].
    const int64_t th = ih + g.pad_top, tw = iw + g.pad_left;
    const int64_t oh0 = th - g.kh + 1 <= 0 ? 0 : (th - g.kh + 1 + g.stride - 1) / g.stride;
    const int64_t ow0 = tw - g.kw + 1 <= 0 ? 0 : (tw - g.kw + 1 + g.stride - 1) / g.stride;
    const int64_t oh1 = th / g.stride < g.ho - 1 ? th / g.stride : g.ho - 1;
    const int64_t ow1 = tw / g.stride < g.wo - 1 ? tw / g.stride : g.wo - 1;
    float s = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        int64_t i0, i1, j0, j1;
        const int64_t count = WindowCount(g, oh, ow, &i0, &i1, &j0, &j1);
        s += gimg[(oh * g.wo + ow) * g.c] * (1.0f / static_cast<float>(count));
      }
    }
    dx[idx] = s;
  }
}

}  // namespace

cudaError_t LaunchAvgPool(const WindowGeometry& g, const float* x, float* y, cudaStream_t stream) {
  const int64_t total = g.n * g.ho * g.wo * g.c;
  if (total <= 0) return cudaSuccess;
  AvgPoolKernel<<<BlocksFor(total), kThreads, 0, stream>>>(g, x, y, total);
  return cudaGetLastError();
}

cudaError_t LaunchAvgPoolGrad(const WindowGeometry& g, const float* grad, float* dx, cudaStream_t stream) {
  const int64_t total = g.n * g.h * g.w * g.c;
  if (total <= 0) return cudaSuccess;
  AvgPoolGradKernel<<<BlocksFor(total), kThreads, 0, stream>>>(g, grad, dx, total);
  return cudaGetLastError();
}

}  // namespace gpu_kernels
}  // namespace weft
