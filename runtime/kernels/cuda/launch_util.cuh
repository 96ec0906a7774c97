// Grid sizing shared by weft's .cu files.
#ifndef WEFT_RUNTIME_KERNELS_CUDA_LAUNCH_UTIL_CUH_
#define WEFT_RUNTIME_KERNELS_CUDA_LAUNCH_UTIL_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace weft {
namespace gpu_kernels {

constexpr int kThreads = 256;
// Grid-stride loops cover the rest: enough blocks to fill an H100 several
// times over without a launch of millions of tiny blocks.
constexpr int64_t kMaxBlocks = 8192;

inline int BlocksFor(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > kMaxBlocks) b = kMaxBlocks;
  return static_cast<int>(b);
}

#define WEFT_GRID_STRIDE(i, n)                                                              \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

}  // namespace gpu_kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_CUDA_LAUNCH_UTIL_CUH_
