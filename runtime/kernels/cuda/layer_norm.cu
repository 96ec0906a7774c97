// LayerNorm and its gradient on channel-last tensors: `rows` rows of
// `channels` contiguous floats, every statistic per row, over its channels.
//
// The forward pass and dx: a warp per row (kThreads / 32 rows per block, the
// grid striding over the rest). Each lane adds its channels lane, lane + 32,
// ... in double and a shuffle tree adds the lanes, so every lane holds the
// row's sums. The variance is two-pass, taken about the row's mean as stored
// in float, as the CPU takes it: a large offset cannot cancel as in E[x^2] -
// E[x]^2.
//
// dgamma and dbeta sum over the rows, per channel. Blocks of tx channels (a
// power of two up to 32) by ty = kThreads / tx row lanes, so that a warp
// reads a run of contiguous channels of one or more rows; the grid is
// channel tiles x row chunks. A thread adds its rows of the chunk in double
// and a tree over the block's row lanes makes the chunk's sum. With one
// chunk the block writes dgamma and dbeta; otherwise each block writes its
// chunk's double partials to the caller's scratch ([2][chunks][channels])
// and a thread per channel adds them in chunk order.
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
constexpr int kMaxTile = 32;           // channels per block of the column sums
constexpr int64_t kRowsPerLane = 16;   // a chunk's rows per row lane (until the chunk cap)
constexpr int64_t kMaxChunks = 256;    // bounds the partials and the finishing loop
static_assert(kThreads % kWarp == 0, "a block is whole warps");

__device__ __forceinline__ double WarpSum(double v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Blocks for a warp per row (the rest by striding).
int RowBlocks(int64_t rows) {
  const int64_t b = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<int>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

// This thread's warp, the number of warps in the grid and its lane. Every
// lane of a warp walks the same rows, so the shuffles see whole warps.
struct WarpRows {
  int64_t first, step;
  int lane;
};

__device__ WarpRows ThisWarp() {
  WarpRows w;
  w.first = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  w.step = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  w.lane = static_cast<int>(threadIdx.x % kWarp);
  return w;
}

__global__ void LayerNormRowsKernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                    const float* __restrict__ beta, int64_t rows, int64_t channels, float eps,
                                    float* __restrict__ y, float* __restrict__ mean, float* __restrict__ inv_std) {
  const WarpRows w = ThisWarp();
  const double n = static_cast<double>(channels);
  for (int64_t r = w.first; r < rows; r += w.step) {
    const float* xr = x + r * channels;
    double sum = 0.0;
    for (int64_t c = w.lane; c < channels; c += kWarp) sum += xr[c];
    const float m = static_cast<float>(WarpSum(sum) / n);
    double m2 = 0.0;
    for (int64_t c = w.lane; c < channels; c += kWarp) {
      const double d = xr[c] - m;
      m2 += d * d;
    }
    const float is = static_cast<float>(1.0 / sqrt(WarpSum(m2) / n + static_cast<double>(eps)));
    if (w.lane == 0) {
      mean[r] = m;
      inv_std[r] = is;
    }
    float* yr = y + r * channels;
    for (int64_t c = w.lane; c < channels; c += kWarp) {
      const float xhat = (xr[c] - m) * is;
      yr[c] = xhat * gamma[c] + beta[c];
    }
  }
}

// dx = inv_std (g - mean_row(g) - xhat mean_row(g xhat)), g = dy gamma (the
// CPU's order of operations).
__global__ void LayerNormDxKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                  const float* __restrict__ gamma, const float* __restrict__ mean,
                                  const float* __restrict__ inv_std, int64_t rows, int64_t channels,
                                  float* __restrict__ dx) {
  const WarpRows w = ThisWarp();
  const double n = static_cast<double>(channels);
  for (int64_t r = w.first; r < rows; r += w.step) {
    const float* dr = dy + r * channels;
    const float* xr = x + r * channels;
    const float m = mean[r], is = inv_std[r];
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t c = w.lane; c < channels; c += kWarp) {
      const float g = dr[c] * gamma[c];
      sum_g += g;
      sum_gx += static_cast<double>(g) * ((xr[c] - m) * is);
    }
    const float mean_g = static_cast<float>(WarpSum(sum_g) / n);
    const float mean_gx = static_cast<float>(WarpSum(sum_gx) / n);
    float* out = dx + r * channels;
    for (int64_t c = w.lane; c < channels; c += kWarp) {
      const float xhat = (xr[c] - m) * is;
      out[c] = is * (dr[c] * gamma[c] - mean_g - xhat * mean_gx);
    }
  }
}

struct ColumnLayout {
  int tx = 1, ty = kThreads;
  int64_t tiles = 0, chunks = 0, rows_per_chunk = 1;
  dim3 grid() const { return dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks)); }
  dim3 block() const { return dim3(tx, ty); }
};

ColumnLayout ColumnLayoutFor(int64_t rows, int64_t channels) {
  ColumnLayout l;
  while (l.tx < kMaxTile && l.tx < channels) l.tx *= 2;
  l.ty = kThreads / l.tx;
  l.tiles = (channels + l.tx - 1) / l.tx;
  l.rows_per_chunk = l.ty * kRowsPerLane;
  l.chunks = (rows + l.rows_per_chunk - 1) / l.rows_per_chunk;
  if (l.chunks > kMaxChunks) {
    l.rows_per_chunk = (rows + kMaxChunks - 1) / kMaxChunks;
    l.chunks = (rows + l.rows_per_chunk - 1) / l.rows_per_chunk;
  }
  return l;
}

// A chunk's sums of dy (-> dbeta) and dy xhat (-> dgamma) per channel.
// kFinal (one chunk): these are dbeta and dgamma; otherwise partials.
template <bool kFinal>
__global__ void LayerNormColumnSumsKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                          const float* __restrict__ mean, const float* __restrict__ inv_std,
                                          int64_t rows, int64_t channels, int64_t rows_per_chunk,
                                          double* __restrict__ partial, float* __restrict__ dgamma,
                                          float* __restrict__ dbeta) {
  __shared__ double red_dy[kThreads];
  __shared__ double red_dyx[kThreads];
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const bool active = c < channels;
  const int64_t r0 = blockIdx.y * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  double sum_dy = 0.0, sum_dyx = 0.0;
  if (active) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
      const int64_t i = r * channels + c;
      const float g = dy[i];
      sum_dy += g;
      sum_dyx += static_cast<double>(g) * ((x[i] - mean[r]) * inv_std[r]);
    }
  }
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  red_dy[t] = sum_dy;
  red_dyx[t] = sum_dyx;
  __syncthreads();
  for (int s = blockDim.y / 2; s > 0; s /= 2) {
    if (threadIdx.y < s) {
      red_dy[t] += red_dy[t + s * blockDim.x];
      red_dyx[t] += red_dyx[t + s * blockDim.x];
    }
    __syncthreads();
  }
  if (!active || threadIdx.y != 0) return;
  if (kFinal) {
    dbeta[c] = static_cast<float>(red_dy[t]);
    dgamma[c] = static_cast<float>(red_dyx[t]);
  } else {
    partial[blockIdx.y * channels + c] = red_dy[t];
    partial[(gridDim.y + blockIdx.y) * channels + c] = red_dyx[t];
  }
}

// A thread per channel: the chunks' partials added in chunk order.
__global__ void LayerNormColumnFinishKernel(const double* __restrict__ partial, int64_t channels, int64_t chunks,
                                            float* __restrict__ dgamma, float* __restrict__ dbeta) {
  WEFT_GRID_STRIDE(c, channels) {
    double sum_dy = 0.0, sum_dyx = 0.0;
    for (int64_t k = 0; k < chunks; ++k) {
      sum_dy += partial[k * channels + c];
      sum_dyx += partial[(chunks + k) * channels + c];
    }
    dbeta[c] = static_cast<float>(sum_dy);
    dgamma[c] = static_cast<float>(sum_dyx);
  }
}

}  // namespace

int64_t LayerNormGradScratchFloats(int64_t rows, int64_t channels) {
  if (rows == 0 || channels == 0) return 0;
  const ColumnLayout l = ColumnLayoutFor(rows, channels);
  return l.chunks > 1 ? 4 * l.chunks * channels : 0;  // two doubles per chunk and channel
}

cudaError_t LaunchLayerNorm(const float* x, const float* gamma, const float* beta, int64_t rows, int64_t channels,
                            float epsilon, float* y, float* mean, float* inv_std, cudaStream_t stream) {
  if (rows == 0 || channels == 0) return cudaSuccess;
  LayerNormRowsKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(x, gamma, beta, rows, channels, epsilon, y, mean,
                                                                inv_std);
  return cudaGetLastError();
}

cudaError_t LaunchLayerNormGrad(const float* dy, const float* x, const float* gamma, const float* mean,
                                const float* inv_std, int64_t rows, int64_t channels, float* scratch, float* dx,
                                float* dgamma, float* dbeta, cudaStream_t stream) {
  if (channels == 0) return cudaSuccess;
  if (rows == 0) {  // no rows: zero sums
    cudaError_t err = cudaMemsetAsync(dgamma, 0, channels * sizeof(float), stream);
    return err != cudaSuccess ? err : cudaMemsetAsync(dbeta, 0, channels * sizeof(float), stream);
  }
  LayerNormDxKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(dy, x, gamma, mean, inv_std, rows, channels, dx);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const ColumnLayout l = ColumnLayoutFor(rows, channels);
  if (l.chunks == 1) {
    LayerNormColumnSumsKernel<true><<<l.grid(), l.block(), 0, stream>>>(dy, x, mean, inv_std, rows, channels,
                                                                        l.rows_per_chunk, nullptr, dgamma, dbeta);
    return cudaGetLastError();
  }
  double* partial = reinterpret_cast<double*>(scratch);
  LayerNormColumnSumsKernel<false><<<l.grid(), l.block(), 0, stream>>>(dy, x, mean, inv_std, rows, channels,
                                                                       l.rows_per_chunk, partial, dgamma, dbeta);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  LayerNormColumnFinishKernel<<<BlocksFor(channels), kThreads, 0, stream>>>(partial, channels, l.chunks, dgamma,
                                                                           dbeta);
  return cudaGetLastError();
}

}  // namespace gpu_kernels
}  // namespace weft
