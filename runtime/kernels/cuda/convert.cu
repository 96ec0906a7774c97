// Mixed precision's operands: float32 rounded to nearest even in float16 or
// bfloat16, the element types of cuBLAS's tensor-core products.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/cuda/launch_util.cuh"

namespace weft {
namespace gpu_kernels {
namespace {

__global__ void ToHalfKernel(const float* __restrict__ x, __half* __restrict__ y, int64_t n) {
  WEFT_GRID_STRIDE(i, n) { y[i] = __float2half_rn(x[i]); }
}

__global__ void ToBFloat16Kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, int64_t n) {
  WEFT_GRID_STRIDE(i, n) { y[i] = __float2bfloat16_rn(x[i]); }
}

}  // namespace

cudaError_t LaunchToHalf(const float* x, void* y, int64_t n, bool bfloat16, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (bfloat16) {
    ToBFloat16Kernel<<<BlocksFor(n), kThreads, 0, stream>>>(x, static_cast<__nv_bfloat16*>(y), n);
  } else {
    ToHalfKernel<<<BlocksFor(n), kThreads, 0, stream>>>(x, static_cast<__half*>(y), n);
  }
  return cudaGetLastError();
}

}  // namespace gpu_kernels
}  // namespace weft
