// Row-major matrix transpose, which turns a convolution filter between
// weft's HWIO layout ([KH * KW * Cin, Cout]) and cuDNN's NHWC filter layout
// KRSC = OHWI ([Cout, KH * KW * Cin]). Filters are small next to the
// activations, so one plain gather per output element is enough.
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/cuda/launch_util.cuh"

namespace weft {
namespace gpu_kernels {
namespace {

// out[c, r] = in[r, c]; consecutive threads write consecutive outputs.
__global__ void TransposeKernel(const float* __restrict__ in, float* __restrict__ out, int64_t rows, int64_t cols) {
  WEFT_GRID_STRIDE(idx, rows * cols) {
    const int64_t r = idx % rows;
    const int64_t c = idx / rows;
    out[idx] = in[r * cols + c];
  }
}

}  // namespace

cudaError_t LaunchTranspose(const float* in, float* out, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t total = rows * cols;
  if (total <= 0) return cudaSuccess;
  TransposeKernel<<<BlocksFor(total), kThreads, 0, stream>>>(in, out, rows, cols);
  return cudaGetLastError();
}

}  // namespace gpu_kernels
}  // namespace weft
