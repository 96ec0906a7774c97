// The row-wise parts of attention; the products are cuBLAS's
// (gpu_attention_kernels.cc). Scores and probabilities are `rows` rows of
// `seq` contiguous floats: row r is query r % seq of one (example, head).
//
// A warp per row (kThreads / 32 rows per block, the grid striding over the
// rest). The softmax takes the row's maximum over its unmasked entries,
// writes exp(s - max) in place while each lane sums its share in double, a
// shuffle tree adds the lanes, and a second pass scales by 1 / sum and
// zeroes the masked entries: the CPU's order of operations
// (cpu/attention_kernels.cc). The backward pass is dS = P (dP - rowsum(P dP)),
// in place over dP.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/cuda/launch_util.cuh"

namespace weft {
namespace gpu_kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = kThreads / kWarp;
static_assert(kThreads % kWarp == 0, "a block is whole warps");

__device__ __forceinline__ double WarpSum(double v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

int RowBlocks(int64_t rows) {
  const int64_t b = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<int>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

// Every lane of a warp walks the same rows, so the shuffles see whole warps.
__global__ void AttentionSoftmaxKernel(float* __restrict__ p, int64_t rows, int64_t seq, bool causal, float scale) {
  const int64_t first = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (int64_t r = first; r < rows; r += step) {
    float* row = p + r * seq;
    const int64_t limit = causal ? r % seq + 1 : seq;
    float m = -INFINITY;
    for (int64_t j = lane; j < limit; j += kWarp) {
      row[j] *= scale;
      m = fmaxf(m, row[j]);
    }
    m = WarpMax(m);
    double sum = 0.0;
    for (int64_t j = lane; j < limit; j += kWarp) {
      const float e = expf(row[j] - m);
      row[j] = e;
      sum += e;
    }
    const float inv = static_cast<float>(1.0 / WarpSum(sum));
    for (int64_t j = lane; j < seq; j += kWarp) row[j] = j < limit ? row[j] * inv : 0.0f;
  }
}

__global__ void AttentionSoftmaxGradKernel(const float* __restrict__ p, float* __restrict__ dp, int64_t rows,
                                           int64_t seq, float scale) {
  const int64_t first = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (int64_t r = first; r < rows; r += step) {
    const float* pr = p + r * seq;
    float* dr = dp + r * seq;
    double dot = 0.0;
    for (int64_t j = lane; j < seq; j += kWarp) dot += static_cast<double>(pr[j]) * dr[j];
    const float d = static_cast<float>(WarpSum(dot));
    for (int64_t j = lane; j < seq; j += kWarp) dr[j] = pr[j] * (dr[j] - d) * scale;
  }
}

}  // namespace

cudaError_t LaunchAttentionSoftmax(float* scores, int64_t rows, int64_t seq, bool causal, float scale,
                                   cudaStream_t stream) {
  if (rows == 0 || seq == 0) return cudaSuccess;
  AttentionSoftmaxKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(scores, rows, seq, causal, scale);
  return cudaGetLastError();
}

cudaError_t LaunchAttentionSoftmaxGrad(const float* probs, float* dprobs, int64_t rows, int64_t seq, float scale,
                                       cudaStream_t stream) {
  if (rows == 0 || seq == 0) return cudaSuccess;
  AttentionSoftmaxGradKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(probs, dprobs, rows, seq, scale);
  return cudaGetLastError();
}

}  // namespace gpu_kernels
}  // namespace weft
