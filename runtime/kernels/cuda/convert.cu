// Mixed precision's operands: float32 rounded to nearest even in float16 or
// bfloat16, the element types of cuBLAS's tensor-core products; and float16
// widened back (the float16 all-reduce's sums).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/cuda/launch_util.cuh"

namespace weft {
namespace gpu_kernels {
namespace {

__device__ __forceinline__ void Store(__half* y, float x) { *y = __float2half_rn(x); }
__device__ __forceinline__ void Store(__nv_bfloat16* y, float x) { *y = __float2bfloat16_rn(x); }

// Both operands of a product in one launch: elements [0, na) of the index
// space are a's, the rest b's.
template <typename H>
__global__ void ToHalfPairKernel(const float* __restrict__ a, H* __restrict__ ya, int64_t na,
                                 const float* __restrict__ b, H* __restrict__ yb, int64_t nb) {
  WEFT_GRID_STRIDE(i, na + nb) {
    if (i < na) {
      Store(ya + i, a[i]);
    } else {
      Store(yb + (i - na), b[i - na]);
    }
  }
}

__global__ void Float16ToFloatKernel(const __half* __restrict__ x, float* __restrict__ y, int64_t n) {
  WEFT_GRID_STRIDE(i, n) { y[i] = __half2float(x[i]); }
}

}  // namespace

cudaError_t LaunchFloat16ToFloat(const void* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  Float16ToFloatKernel<<<BlocksFor(n), kThreads, 0, stream>>>(static_cast<const __half*>(x), y, n);
  return cudaGetLastError();
}

cudaError_t LaunchToHalfPair(const float* a, void* ya, int64_t na, const float* b, void* yb, int64_t nb,
                             bool bfloat16, cudaStream_t stream) {
  if (na + nb == 0) return cudaSuccess;
  if (bfloat16) {
    ToHalfPairKernel<<<BlocksFor(na + nb), kThreads, 0, stream>>>(a, static_cast<__nv_bfloat16*>(ya), na, b,
                                                                   static_cast<__nv_bfloat16*>(yb), nb);
  } else {
    ToHalfPairKernel<<<BlocksFor(na + nb), kThreads, 0, stream>>>(a, static_cast<__half*>(ya), na, b,
                                                                   static_cast<__half*>(yb), nb);
  }
  return cudaGetLastError();
}

}  // namespace gpu_kernels
}  // namespace weft
