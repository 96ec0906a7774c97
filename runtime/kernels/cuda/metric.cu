// Evaluation metrics: InTopK's count of rows whose label is among the k
// largest logits. One warp per row, as in reduce.cu; each warp adds its
// rows' hits to the output once.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/cuda/launch_util.cuh"

namespace weft {
namespace gpu_kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kThreads / kWarp;

__global__ void InTopKKernel(const float* __restrict__ logits, const int32_t* __restrict__ labels, int64_t rows,
                             int64_t cols, int64_t k, float* __restrict__ count) {
  const int lane = threadIdx.x % kWarp;
  int64_t hits = 0;
  for (int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp; row < rows;
       row += static_cast<int64_t>(blockDim.x) * gridDim.x / kWarp) {
    const int32_t label = labels[row];
    if (label < 0 || label >= cols) continue;  // the whole warp reads the same label
    const float* z = logits + row * cols;
    const float target = z[label];
    if (!isfinite(target)) continue;
    int64_t greater = 0;
    for (int64_t j = lane; j < cols; j += kWarp) greater += z[j] > target;
    for (int o = kWarp / 2; o > 0; o /= 2) greater += __shfl_xor_sync(0xffffffffu, greater, o);
    hits += greater < k;
  }
  if (lane == 0 && hits > 0) atomicAdd(count, static_cast<float>(hits));
}

}  // namespace

cudaError_t LaunchInTopK(const float* logits, const int32_t* labels, int64_t rows, int64_t cols, int64_t k,
                         float* count, cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(count, 0, sizeof(float), stream);
  if (err != cudaSuccess || rows == 0) return err;
  int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  InTopKKernel<<<static_cast<int>(blocks), kThreads, 0, stream>>>(logits, labels, rows, cols, k, count);
  return cudaGetLastError();
}

}  // namespace gpu_kernels
}  // namespace weft
