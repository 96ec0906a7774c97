// Reductions and row-wise kernels: Sum/Mean, BiasAddGrad, RowDot, ArgMax,
// Softmax(+Grad) and the sparse softmax cross-entropy (loss and backprop in
// one launch). Rows are handled one warp each, so the common shapes here
// (64 x 10 logits) need a single small launch.
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

template <typename T>
__device__ __forceinline__ T WarpSum(T v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

int RowBlocks(int64_t rows) {
  int64_t b = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (b < 1) b = 1;
  if (b > kMaxBlocks) b = kMaxBlocks;
  return static_cast<int>(b);
}

// Every warp of the grid takes rows warp, warp + warps, ...
#define WEFT_WARP_ROWS(row, rows)                                                         \
  for (int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp; \
       row < (rows); row += static_cast<int64_t>(blockDim.x) * gridDim.x / kWarp)

constexpr int kReduceThreads = 1024;

// One block: per-thread double sums, then a block tree in double.
__global__ void ReduceAllKernel(const float* __restrict__ x, int64_t n, bool mean, float* __restrict__ out) {
  __shared__ double partial[kReduceThreads / kWarp];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  s = WarpSum(s);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) partial[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < blockDim.x / kWarp ? partial[lane] : 0.0;
    s = WarpSum(s);
    if (lane == 0) {
      if (mean) s = n == 0 ? NAN : s / static_cast<double>(n);
      out[0] = static_cast<float>(s);
    }
  }
}

// BiasAddGrad: blocks of 32 columns x 8 row lanes over a chunk of rows.
constexpr int kColTile = 32;
constexpr int kRowLanes = 8;
constexpr int64_t kRowsPerChunk = 256;

int64_t Chunks(int64_t rows) {
  int64_t c = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  if (c > 65535) c = 65535;
  return c < 1 ? 1 : c;
}

__global__ void ColumnSumKernel(const float* __restrict__ g, int64_t rows, int64_t cols, int64_t rows_per_chunk,
                                float* __restrict__ out) {
  __shared__ float tile[kRowLanes][kColTile + 1];
  const int64_t col = blockIdx.x * static_cast<int64_t>(kColTile) + threadIdx.x;
  const int64_t r0 = blockIdx.y * rows_per_chunk;
  int64_t r1 = r0 + rows_per_chunk;
  if (r1 > rows) r1 = rows;
  float s = 0.0f;
  if (col < cols) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) s += g[r * cols + col];
  }
  tile[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float t = tile[0][threadIdx.x];
    for (int k = 1; k < kRowLanes; ++k) t += tile[k][threadIdx.x];
    out[blockIdx.y * cols + col] = t;  // out is [chunks, cols]
  }
}

__global__ void SumChunksKernel(const float* __restrict__ partial, int64_t chunks, int64_t cols,
                                float* __restrict__ out) {
  WEFT_GRID_STRIDE(col, cols) {
    float s = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) s += partial[c * cols + col];
    out[col] = s;
  }
}

__global__ void ZeroKernel(float* __restrict__ out, int64_t n) {
  WEFT_GRID_STRIDE(i, n) { out[i] = 0.0f; }
}

__global__ void RowDotKernel(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out,
                             int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % kWarp;
  WEFT_WARP_ROWS(row, rows) {
    const float* xr = x + row * cols;
    const float* yr = y + row * cols;
    float s = 0.0f;
    for (int64_t j = lane; j < cols; j += kWarp) s += xr[j] * yr[j];
    s = WarpSum(s);
    if (lane == 0) out[row] = s;
  }
}

// A sequential scan per row keeps the CPU's rule exactly (first maximum by
// `>`, including how NaNs fall).
__global__ void ArgMaxKernel(const float* __restrict__ x, int32_t* __restrict__ out, int64_t rows, int64_t cols) {
  WEFT_GRID_STRIDE(row, rows) {
    const float* r = x + row * cols;
    int64_t best = 0;
    float bv = r[0];
    for (int64_t j = 1; j < cols; ++j) {
      const float v = r[j];
      if (v > bv) {
        best = j;
        bv = v;
      }
    }
    out[row] = static_cast<int32_t>(best);
  }
}

__device__ __forceinline__ float RowMax(const float* r, int64_t cols, int lane) {
  float m = -INFINITY;
  for (int64_t j = lane; j < cols; j += kWarp) m = fmaxf(m, r[j]);
  return WarpMax(m);
}

__global__ void SoftmaxKernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % kWarp;
  WEFT_WARP_ROWS(row, rows) {
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    const float m = RowMax(xr, cols, lane);
    float s = 0.0f;
    for (int64_t j = lane; j < cols; j += kWarp) s += expf(xr[j] - m);
    const float inv = 1.0f / WarpSum(s);
    for (int64_t j = lane; j < cols; j += kWarp) yr[j] = expf(xr[j] - m) * inv;
  }
}

__global__ void SoftmaxGradKernel(const float* __restrict__ y, const float* __restrict__ g, float* __restrict__ out,
                                  int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % kWarp;
  WEFT_WARP_ROWS(row, rows) {
    const float* yr = y + row * cols;
    const float* gr = g + row * cols;
    float dot = 0.0f;
    for (int64_t j = lane; j < cols; j += kWarp) dot += yr[j] * gr[j];
    dot = WarpSum(dot);
    for (int64_t j = lane; j < cols; j += kWarp) out[row * cols + j] = (gr[j] - dot) * yr[j];
  }
}

// error: host-mapped [flag, row, label, cols]; flag 1 while the first bad row is
// being recorded, 2 once row and label are visible.
__device__ void RecordBadLabel(int32_t* error, int64_t row, int32_t label, int64_t cols) {
  if (error == nullptr) return;
  if (atomicCAS_system(&error[0], 0, 1) == 0) {
    error[1] = static_cast<int32_t>(row);
    error[2] = label;
    error[3] = static_cast<int32_t>(cols);
    __threadfence_system();
    atomicExch_system(&error[0], 2);
  }
}

__global__ void SparseXentKernel(const float* __restrict__ logits, const int32_t* __restrict__ labels,
                                 float* __restrict__ loss, float* __restrict__ backprop, int64_t rows, int64_t cols,
                                 int32_t* error) {
  const int lane = threadIdx.x % kWarp;
  WEFT_WARP_ROWS(row, rows) {
    const float* z = logits + row * cols;
    float* b = backprop + row * cols;
    const int32_t label = labels[row];
    if (label < 0 || label >= cols) {
      for (int64_t j = lane; j < cols; j += kWarp) b[j] = NAN;
      if (lane == 0) {
        loss[row] = NAN;
        RecordBadLabel(error, row, label, cols);
      }
      continue;
    }
    const float m = RowMax(z, cols, lane);
    float s = 0.0f;
    for (int64_t j = lane; j < cols; j += kWarp) s += expf(z[j] - m);
    s = WarpSum(s);
    const float inv = 1.0f / s;
    for (int64_t j = lane; j < cols; j += kWarp) {
      const float p = expf(z[j] - m) * inv;
      b[j] = j == label ? p - 1.0f : p;
    }
    if (lane == 0) loss[row] = logf(s) - (z[label] - m);
  }
}

}  // namespace

cudaError_t LaunchReduceAll(const float* x, int64_t n, bool mean, float* out, cudaStream_t stream) {
  ReduceAllKernel<<<1, kReduceThreads, 0, stream>>>(x, n, mean, out);
  return cudaGetLastError();
}

int64_t BiasAddGradScratchFloats(int64_t rows, int64_t cols) {
  const int64_t chunks = Chunks(rows);
  return chunks > 1 ? chunks * cols : 0;
}

cudaError_t LaunchBiasAddGrad(const float* g, int64_t rows, int64_t cols, float* partial, float* out,
                              cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  if (rows == 0) {
    ZeroKernel<<<BlocksFor(cols), kThreads, 0, stream>>>(out, cols);
    return cudaGetLastError();
  }
  const int64_t chunks = Chunks(rows);
  const int64_t per = (rows + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>((cols + kColTile - 1) / kColTile), static_cast<unsigned>(chunks));
  const dim3 block(kColTile, kRowLanes);
  if (chunks == 1) {
    ColumnSumKernel<<<grid, block, 0, stream>>>(g, rows, cols, per, out);
    return cudaGetLastError();
  }
  ColumnSumKernel<<<grid, block, 0, stream>>>(g, rows, cols, per, partial);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  SumChunksKernel<<<BlocksFor(cols), kThreads, 0, stream>>>(partial, chunks, cols, out);
  return cudaGetLastError();
}

cudaError_t LaunchRowDot(const float* x, const float* y, float* out, int64_t rows, int64_t cols,
                         cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  RowDotKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(x, y, out, rows, cols);
  return cudaGetLastError();
}

cudaError_t LaunchArgMax(const float* x, int32_t* out, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  ArgMaxKernel<<<BlocksFor(rows, 128), 128, 0, stream>>>(x, out, rows, cols);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmax(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  SoftmaxKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(x, y, rows, cols);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxGrad(const float* y, const float* g, float* out, int64_t rows, int64_t cols,
                              cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  SoftmaxGradKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(y, g, out, rows, cols);
  return cudaGetLastError();
}

cudaError_t LaunchSparseXent(const float* logits, const int32_t* labels, float* loss, float* backprop,
                             int64_t rows, int64_t cols, int32_t* error, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  SparseXentKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(logits, labels, loss, backprop, rows, cols, error);
  return cudaGetLastError();
}

}  // namespace gpu_kernels
}  // namespace weft
