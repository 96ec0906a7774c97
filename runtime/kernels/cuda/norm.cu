// BatchNorm (training, gradient, inference) and global average pooling on
// channel-last tensors: `rows` rows of `channels` contiguous floats, each
// statistic per channel over the rows.
//
// Layout: blocks of kThreads threads, tx channels (a power of two up to 32)
// by ty = kThreads / tx row lanes, so that a warp reads a run of contiguous
// channels of one or more rows; the grid is channel tiles x row chunks.
// A thread adds its values in float runs of kRun and the runs in double;
// a tree over the block's row lanes, in double, makes the chunk's sum.
//
// With one chunk (up to ty * kRowsPerThread rows: a dense layer's batch) a
// block holds whole columns and finishes the op itself, in one launch.
// Otherwise each block writes its chunk's double partials to the caller's
// scratch ([2][chunks][channels]), a block per channel combines them, and a
// third launch writes the rows.
//
// BatchNorm's variance is two-pass within a chunk (the sum, then squares
// about the chunk's mean, the chunk still in cache) and the chunks combine
// exactly (Chan et al.), so a large offset cannot cancel as in E[x^2] -
// E[x]^2. Like the CPU's, it is taken about the mean as stored in float.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/cuda/launch_util.cuh"

namespace weft {
namespace gpu_kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kMaxTile = 32;           // channels per block
constexpr int kRun = 8;                // values a thread adds in float before its double sum
constexpr int64_t kRowsPerThread = 8;  // a chunk's rows per row lane (until the chunk cap)
constexpr int64_t kMaxChunks = 512;    // bounds the partials and the combining loops
static_assert(kMaxChunks <= 2 * kThreads, "BlockChunkSum loads two chunks per thread at once");

struct Layout {
  int tx = 1, ty = kThreads;
  int64_t tiles = 0, chunks = 0, rows_per_chunk = 1;
  dim3 grid() const { return dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks)); }
  dim3 block() const { return dim3(tx, ty); }
};

Layout LayoutFor(int64_t rows, int64_t channels) {
  Layout l;
  while (l.tx < kMaxTile && l.tx < channels) l.tx *= 2;
  l.ty = kThreads / l.tx;
  l.tiles = (channels + l.tx - 1) / l.tx;
  l.rows_per_chunk = l.ty * kRowsPerThread;
  l.chunks = (rows + l.rows_per_chunk - 1) / l.rows_per_chunk;
  if (l.chunks > kMaxChunks) {
    l.rows_per_chunk = (rows + kMaxChunks - 1) / kMaxChunks;
    l.chunks = (rows + l.rows_per_chunk - 1) / l.rows_per_chunk;
  }
  return l;
}

// Blocks for one block per channel (the rest by striding).
int ChannelBlocks(int64_t channels) { return static_cast<int>(channels < kMaxBlocks ? channels : kMaxBlocks); }

// This thread's channel and its rows of the block's chunk: rows
// begin, begin + blockDim.y, ... below end. A thread past the last channel
// gets no rows (begin == end) but still takes part in the block's trees.
struct Span {
  int64_t c, begin, end;
  bool active;
};

__device__ Span ThreadSpan(int64_t rows, int64_t channels, int64_t rows_per_chunk) {
  Span s;
  s.c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  s.active = s.c < channels;
  const int64_t r0 = blockIdx.y * rows_per_chunk;
  s.end = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  s.begin = s.active ? r0 + threadIdx.y : s.end;
  return s;
}

// The sums of f(r) = (a, b) over rows begin, begin + step, ... below end:
// float runs of kRun, added in double.
template <typename F>
__device__ double2 StridedSums(int64_t begin, int64_t end, int64_t step, F f) {
  double2 total = make_double2(0.0, 0.0);
  for (int64_t r = begin; r < end; r += kRun * step) {
    float2 run = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int k = 0; k < kRun; ++k) {
      const int64_t rk = r + k * step;
      if (rk < end) {
        const float2 v = f(rk);
        run.x += v.x;
        run.y += v.y;
      }
    }
    total.x += run.x;
    total.y += run.y;
  }
  return total;
}

// The sum of v over the block's row lanes, for every thread of the column.
// `red` holds kThreads doubles; every thread of the block must call this.
__device__ double ColumnTotal(double* red, double v) {
  const int i = threadIdx.y * blockDim.x + threadIdx.x;
  red[i] = v;
  __syncthreads();
  for (int s = blockDim.y / 2; s > 0; s /= 2) {
    if (threadIdx.y < s) red[i] += red[i + s * blockDim.x];
    __syncthreads();
  }
  const double total = red[threadIdx.x];
  __syncthreads();  // red is free again
  return total;
}

template <typename T>
__device__ __forceinline__ T WarpSum(T v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The biased variance from m2, the squared deviations about the mean (a
// rounding below zero clamped).
__device__ double Biased(double m2, int64_t rows) { return (m2 > 0.0 ? m2 : 0.0) / static_cast<double>(rows); }

__device__ float InvStd(double biased, float eps) {
  return static_cast<float>(1.0 / sqrt(biased + static_cast<double>(eps)));
}

// Stores channel c's statistics from m2 taken about the float mean mf, as
// the CPU computes them.
__device__ void StoreMoments(double m2, float mf, int64_t rows, float eps, int64_t c, float* mean, float* var,
                             float* inv_std) {
  const double biased = Biased(m2, rows);
  const double unbias = rows > 1 ? static_cast<double>(rows) / static_cast<double>(rows - 1) : 1.0;
  mean[c] = mf;
  var[c] = static_cast<float>(biased * unbias);
  inv_std[c] = InvStd(biased, eps);
}

// y = x scale + shift over the thread's rows.
__device__ void WriteNormalized(const float* __restrict__ x, const Span& s, int64_t channels, float scale,
                                float shift, float* __restrict__ y) {
  for (int64_t r = s.begin; r < s.end; r += blockDim.y) {
    const int64_t i = r * channels + s.c;
    y[i] = x[i] * scale + shift;
  }
}

// A chunk's sum and squared deviations, taken about its float mean cm and
// stored about its exact mean mk (- n (mk - cm)^2). kFused (one chunk): these
// are the column's, about the float mean the CPU takes them about too, and
// the block finishes the op.
template <bool kFused>
__global__ void BatchNormStatsKernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                     const float* __restrict__ beta, int64_t rows, int64_t channels,
                                     int64_t rows_per_chunk, float eps, double* __restrict__ partial,
                                     float* __restrict__ y, float* __restrict__ mean, float* __restrict__ var,
                                     float* __restrict__ inv_std) {
  __shared__ double red[kThreads];
  const Span s = ThreadSpan(rows, channels, rows_per_chunk);
  const int64_t step = blockDim.y;
  const double sum = ColumnTotal(
      red, StridedSums(s.begin, s.end, step, [&](int64_t r) { return make_float2(x[r * channels + s.c], 0.0f); }).x);
  const int64_t n = s.end - blockIdx.y * rows_per_chunk;
  const float cm = static_cast<float>(sum / static_cast<double>(n));
  const double m2 = ColumnTotal(red, StridedSums(s.begin, s.end, step, [&](int64_t r) {
                                       const float d = x[r * channels + s.c] - cm;
                                       return make_float2(d * d, 0.0f);
                                     }).x);
  if (!s.active) return;
  if (!kFused) {
    if (threadIdx.y == 0) {
      const double off = sum / static_cast<double>(n) - cm;
      partial[blockIdx.y * channels + s.c] = sum;
      partial[(gridDim.y + blockIdx.y) * channels + s.c] = m2 - static_cast<double>(n) * off * off;
    }
    return;
  }
  // Every thread of the column holds the statistics; row lane 0 stores them.
  if (threadIdx.y == 0) StoreMoments(m2, cm, rows, eps, s.c, mean, var, inv_std);
  const float is = InvStd(Biased(m2, rows), eps);
  const float scale = gamma[s.c] * is;
  WriteNormalized(x, s, channels, scale, beta[s.c] - cm * scale, y);
}

// The block's sum of f(k) over k < chunks, for every thread. kMaxChunks is
// at most two per thread: both loads are in flight at once.
template <typename F>
__device__ double BlockChunkSum(int64_t chunks, F f) {
  __shared__ double warp_sums[kThreads / kWarp];
  double s0 = 0.0, s1 = 0.0;
  int64_t k = threadIdx.x;
  for (; k + blockDim.x < chunks; k += 2 * blockDim.x) {
    s0 += f(k);
    s1 += f(k + blockDim.x);
  }
  if (k < chunks) s0 += f(k);
  const double w = WarpSum(s0 + s1);
  if (threadIdx.x % kWarp == 0) warp_sums[threadIdx.x / kWarp] = w;
  __syncthreads();
  double total = 0.0;
  for (int i = 0; i < static_cast<int>(blockDim.x) / kWarp; ++i) total += warp_sums[i];
  __syncthreads();  // warp_sums is free again
  return total;
}

// A block of kThreads per channel: the chunks' partials combined into the
// column's statistics (Chan et al.): each chunk's squares about its mean mk
// become squares about the column's float mean mf, + n (mk - mf)^2.
__global__ void BatchNormFinishKernel(const double* __restrict__ partial, int64_t rows, int64_t channels,
                                      int64_t chunks, int64_t rows_per_chunk, float eps, float* __restrict__ mean,
                                      float* __restrict__ var, float* __restrict__ inv_std) {
  // Every chunk has rows_per_chunk rows but the last.
  const double n_full = static_cast<double>(rows_per_chunk);
  const double n_last = static_cast<double>(rows - (chunks - 1) * rows_per_chunk);
  const double inv_full = 1.0 / n_full, inv_last = 1.0 / n_last;
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    const double* sums = partial + c;
    const double* squares = partial + chunks * channels + c;
    const double sum = BlockChunkSum(chunks, [&](int64_t k) { return sums[k * channels]; });
    const float mf = static_cast<float>(sum / static_cast<double>(rows));
    const double m2 = BlockChunkSum(chunks, [&](int64_t k) {
      const bool last = k == chunks - 1;
      const double d = sums[k * channels] * (last ? inv_last : inv_full) - mf;
      return squares[k * channels] + (last ? n_last : n_full) * d * d;
    });
    if (threadIdx.x == 0) StoreMoments(m2, mf, rows, eps, c, mean, var, inv_std);
  }
}

// y = x scale + shift: training (kFromVariance false), scale = gamma
// inv_std with `stat` the inv_std; inference, scale = gamma / sqrt(variance
// + eps) with `stat` the variance. shift = beta - mean scale.
template <bool kFromVariance>
__global__ void NormalizeKernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                const float* __restrict__ beta, const float* __restrict__ mean,
                                const float* __restrict__ stat, float eps, int64_t rows, int64_t channels,
                                int64_t rows_per_chunk, float* __restrict__ y) {
  const Span s = ThreadSpan(rows, channels, rows_per_chunk);
  if (!s.active) return;
  const float scale = kFromVariance ? gamma[s.c] / sqrtf(stat[s.c] + eps) : gamma[s.c] * stat[s.c];
  WriteNormalized(x, s, channels, scale, beta[s.c] - mean[s.c] * scale, y);
}

// dx = k (dy - dbeta / M - xhat dgamma / M), k = gamma inv_std, over the
// thread's rows (the CPU's order of operations).
__device__ void WriteDx(const float* __restrict__ dy, const float* __restrict__ x, const Span& s, int64_t rows,
                        int64_t channels, float gamma, float m, float is, float dgamma, float dbeta,
                        float* __restrict__ dx) {
  const float k = gamma * is;
  const float mean_dy = dbeta / static_cast<float>(rows);
  const float mean_dyx = dgamma / static_cast<float>(rows);
  for (int64_t r = s.begin; r < s.end; r += blockDim.y) {
    const int64_t i = r * channels + s.c;
    const float xhat = (x[i] - m) * is;
    dx[i] = k * (dy[i] - mean_dy - xhat * mean_dyx);
  }
}

// A chunk's sums of dy and dy xhat. kFused (one chunk): these are dbeta and
// dgamma, and the block writes dx as well.
template <bool kFused>
__global__ void BatchNormGradStatsKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                         const float* __restrict__ gamma, const float* __restrict__ mean,
                                         const float* __restrict__ inv_std, int64_t rows, int64_t channels,
                                         int64_t rows_per_chunk, double* __restrict__ partial,
                                         float* __restrict__ dx, float* __restrict__ dgamma,
                                         float* __restrict__ dbeta) {
  __shared__ double red[kThreads];
  const Span s = ThreadSpan(rows, channels, rows_per_chunk);
  const float m = s.active ? mean[s.c] : 0.0f;
  const float is = s.active ? inv_std[s.c] : 0.0f;
  const double2 sums = StridedSums(s.begin, s.end, blockDim.y, [&](int64_t r) {
    const int64_t i = r * channels + s.c;
    const float g = dy[i];
    return make_float2(g, g * ((x[i] - m) * is));
  });
  const double sum_dy = ColumnTotal(red, sums.x);
  const double sum_dyx = ColumnTotal(red, sums.y);
  if (!s.active) return;
  if (!kFused) {
    if (threadIdx.y == 0) {
      partial[blockIdx.y * channels + s.c] = sum_dy;
      partial[(gridDim.y + blockIdx.y) * channels + s.c] = sum_dyx;
    }
    return;
  }
  const float db = static_cast<float>(sum_dy), dg = static_cast<float>(sum_dyx);
  if (threadIdx.y == 0) {
    dbeta[s.c] = db;
    dgamma[s.c] = dg;
  }
  WriteDx(dy, x, s, rows, channels, gamma[s.c], m, is, dg, db, dx);
}

// A block of kThreads per channel: dbeta and dgamma from the chunks' partials.
__global__ void BatchNormGradFinishKernel(const double* __restrict__ partial, int64_t channels, int64_t chunks,
                                          float* __restrict__ dgamma, float* __restrict__ dbeta) {
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    const double* dys = partial + c;
    const double* dyxs = partial + chunks * channels + c;
    const double sum_dy = BlockChunkSum(chunks, [&](int64_t k) { return dys[k * channels]; });
    const double sum_dyx = BlockChunkSum(chunks, [&](int64_t k) { return dyxs[k * channels]; });
    if (threadIdx.x == 0) {
      dbeta[c] = static_cast<float>(sum_dy);
      dgamma[c] = static_cast<float>(sum_dyx);
    }
  }
}

__global__ void BatchNormDxKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                  const float* __restrict__ gamma, const float* __restrict__ mean,
                                  const float* __restrict__ inv_std, const float* __restrict__ dgamma,
                                  const float* __restrict__ dbeta, int64_t rows, int64_t channels,
                                  int64_t rows_per_chunk, float* __restrict__ dx) {
  const Span s = ThreadSpan(rows, channels, rows_per_chunk);
  if (!s.active) return;
  WriteDx(dy, x, s, rows, channels, gamma[s.c], mean[s.c], inv_std[s.c], dgamma[s.c], dbeta[s.c], dx);
}

// Blocks over (channel tiles, images); each sums its images' hw positions.
__global__ void GlobalAvgPoolKernel(const float* __restrict__ x, int64_t n, int64_t hw, int64_t channels,
                                    float* __restrict__ out) {
  __shared__ double red[kThreads];
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const bool active = c < channels;
  const float inv = 1.0f / static_cast<float>(hw);
  for (int64_t img = blockIdx.y; img < n; img += gridDim.y) {
    const float* px = x + img * hw * channels + c;
    const double2 s = StridedSums(active ? threadIdx.y : hw, hw, blockDim.y,
                                  [&](int64_t p) { return make_float2(px[p * channels], 0.0f); });
    const double total = ColumnTotal(red, s.x);
    if (active && threadIdx.y == 0) out[img * channels + c] = static_cast<float>(total) * inv;
  }
}

// dx[img, p, c] = g[img, c] / hw over rows img * hw + p; the image advances
// as the row passes hw.
__global__ void GlobalAvgPoolGradKernel(const float* __restrict__ g, int64_t hw, int64_t channels, int64_t rows,
                                        int64_t rows_per_chunk, float* __restrict__ dx) {
  const Span s = ThreadSpan(rows, channels, rows_per_chunk);
  if (!s.active) return;
  const float inv = 1.0f / static_cast<float>(hw);
  int64_t img = s.begin / hw, p = s.begin - img * hw;
  for (int64_t r = s.begin; r < s.end; r += blockDim.y) {
    dx[r * channels + s.c] = g[img * channels + s.c] * inv;
    p += blockDim.y;
    if (p >= hw) {
      img += p / hw;
      p %= hw;
    }
  }
}

}  // namespace

int64_t BatchNormScratchFloats(int64_t rows, int64_t channels) {
  const Layout l = LayoutFor(rows, channels);
  return l.chunks > 1 ? 4 * l.chunks * channels : 0;  // two doubles per chunk and channel
}

cudaError_t LaunchBatchNorm(const float* x, const float* gamma, const float* beta, int64_t rows, int64_t channels,
                            float epsilon, float* scratch, float* y, float* mean, float* variance, float* inv_std,
                            cudaStream_t stream) {
  if (rows == 0 || channels == 0) return cudaSuccess;
  const Layout l = LayoutFor(rows, channels);
  if (l.chunks == 1) {
    BatchNormStatsKernel<true><<<l.grid(), l.block(), 0, stream>>>(x, gamma, beta, rows, channels, l.rows_per_chunk,
                                                                   epsilon, nullptr, y, mean, variance, inv_std);
    return cudaGetLastError();
  }
  double* partial = reinterpret_cast<double*>(scratch);
  BatchNormStatsKernel<false><<<l.grid(), l.block(), 0, stream>>>(x, gamma, beta, rows, channels, l.rows_per_chunk,
                                                                  epsilon, partial, y, mean, variance, inv_std);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  BatchNormFinishKernel<<<ChannelBlocks(channels), kThreads, 0, stream>>>(partial, rows, channels, l.chunks,
                                                                        l.rows_per_chunk, epsilon, mean, variance,
                                                                        inv_std);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  NormalizeKernel<false><<<l.grid(), l.block(), 0, stream>>>(x, gamma, beta, mean, inv_std, epsilon, rows, channels,
                                                             l.rows_per_chunk, y);
  return cudaGetLastError();
}

cudaError_t LaunchBatchNormGrad(const float* dy, const float* x, const float* gamma, const float* mean,
                                const float* inv_std, int64_t rows, int64_t channels, float* scratch, float* dx,
                                float* dgamma, float* dbeta, cudaStream_t stream) {
  if (channels == 0) return cudaSuccess;
  if (rows == 0) {  // no rows: zero sums
    cudaError_t err = cudaMemsetAsync(dgamma, 0, channels * sizeof(float), stream);
    return err != cudaSuccess ? err : cudaMemsetAsync(dbeta, 0, channels * sizeof(float), stream);
  }
  const Layout l = LayoutFor(rows, channels);
  if (l.chunks == 1) {
    BatchNormGradStatsKernel<true><<<l.grid(), l.block(), 0, stream>>>(
        dy, x, gamma, mean, inv_std, rows, channels, l.rows_per_chunk, nullptr, dx, dgamma, dbeta);
    return cudaGetLastError();
  }
  double* partial = reinterpret_cast<double*>(scratch);
  BatchNormGradStatsKernel<false><<<l.grid(), l.block(), 0, stream>>>(
      dy, x, gamma, mean, inv_std, rows, channels, l.rows_per_chunk, partial, dx, dgamma, dbeta);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  BatchNormGradFinishKernel<<<ChannelBlocks(channels), kThreads, 0, stream>>>(partial, channels, l.chunks, dgamma,
                                                                            dbeta);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  BatchNormDxKernel<<<l.grid(), l.block(), 0, stream>>>(dy, x, gamma, mean, inv_std, dgamma, dbeta, rows, channels,
                                                        l.rows_per_chunk, dx);
  return cudaGetLastError();
}

cudaError_t LaunchBatchNormInference(const float* x, const float* gamma, const float* beta, const float* mean,
                                     const float* variance, int64_t rows, int64_t channels, float epsilon, float* y,
                                     cudaStream_t stream) {
  if (rows == 0 || channels == 0) return cudaSuccess;
  const Layout l = LayoutFor(rows, channels);
  NormalizeKernel<true><<<l.grid(), l.block(), 0, stream>>>(x, gamma, beta, mean, variance, epsilon, rows, channels,
                                                            l.rows_per_chunk, y);
  return cudaGetLastError();
}

cudaError_t LaunchGlobalAvgPool(const float* x, int64_t n, int64_t hw, int64_t channels, float* out,
                                cudaStream_t stream) {
  if (n == 0 || channels == 0) return cudaSuccess;
  Layout l = LayoutFor(hw, channels);
  l.chunks = n < 65535 ? n : 65535;  // images, the rest by striding
  GlobalAvgPoolKernel<<<l.grid(), l.block(), 0, stream>>>(x, n, hw, channels, out);
  return cudaGetLastError();
}

cudaError_t LaunchGlobalAvgPoolGrad(const float* g, int64_t n, int64_t hw, int64_t channels, float* dx,
                                    cudaStream_t stream) {
  const int64_t rows = n * hw;
  if (rows == 0 || channels == 0) return cudaSuccess;
  const Layout l = LayoutFor(rows, channels);
  GlobalAvgPoolGradKernel<<<l.grid(), l.block(), 0, stream>>>(g, hw, channels, rows, l.rows_per_chunk, dx);
  return cudaGetLastError();
}

}  // namespace gpu_kernels
}  // namespace weft
