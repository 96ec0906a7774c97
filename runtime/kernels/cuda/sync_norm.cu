// Synchronised batch norm (graph/ops/sync_norm_ops.cc) on channel-last
// tensors: `rows` rows of `channels` contiguous floats, each statistic per
// channel over the rows, as the CPU kernels compute them
// (runtime/kernels/cpu/sync_norm_kernels.cc).
//
// Layout, as norm.cu's: blocks of kThreads threads, tx channels (a power of
// two up to 32) by ty = kThreads / tx row lanes; the grid is channel tiles x
// row chunks. BatchNormSums and BatchNormFromSumsGrad share one column
// reduction: a thread adds its rows' terms in double, in row order, a tree
// over the block's row lanes makes the chunk's sums, and a block per channel
// adds the chunks' partials (the caller's scratch, [2][chunks][channels]) in
// a fixed order. No atomics: the sums are the same on every run. With one
// chunk (a dense layer's batch) the block finishes the op in one launch.
//
// The sums are double until they are stored, as on the CPU, which keeps
// BatchNormFromSums' E[x^2] - E[x]^2 to float precision. The global row
// count is a device scalar; a count below 1 (or not finite) gives NaN
// statistics, since the GPU cannot refuse it without reading it on the host.
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
constexpr int kBatch = 4;              // rows whose loads a thread issues before their adds
constexpr int64_t kRowsPerThread = 8;  // a chunk's rows per row lane (until the chunk cap)
constexpr int64_t kMaxChunks = 512;    // bounds the partials and the combining loops
static_assert(kMaxChunks <= 2 * kThreads, "BlockChunkSum loads two chunks per thread at once");

struct Layout {
  int tx = 1, ty = kThreads;
  int64_t tiles = 0, chunks = 0, rows_per_chunk = 1;
  dim3 grid() const { return dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks)); }
  dim3 block() const { return dim3(tx, ty); }
};

// No rows gives no chunks.
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

// Blocks for one block per channel (the rest by striding); at least one, so
// that BatchNormSums writes its count when x has no channels.
int ChannelBlocks(int64_t channels) {
  return static_cast<int>(channels < 1 ? 1 : channels < kMaxBlocks ? channels : kMaxBlocks);
}

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

// n, the global row count, or NaN where it is below 1 or not finite (the
// CPU refuses such a count; here every statistic from it is NaN).
__device__ double CountOf(const float* count) {
  const double n = *count;
  return n >= 1.0 && isfinite(n) ? n : NAN;
}

// The sums of t's terms over the thread's rows, in row order, in double.
// Each batch's loads are issued before its adds (t.Use may store).
template <typename Terms>
__device__ double2 ThreadSums(const Terms& t, const Span& s, int64_t channels) {
  double2 acc = make_double2(0.0, 0.0);
  const int64_t step = blockDim.y * channels;  // between the thread's rows
  const int64_t end = s.end * channels;        // row r < s.end iff r * channels + c < end
  int64_t i = s.begin * channels + s.c;
  for (; i + (kBatch - 1) * step < end; i += kBatch * step) {
    float2 v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) v[k] = t.Load(i + k * step);
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const double2 d = t.Use(i + k * step, v[k]);
      acc.x += d.x;
      acc.y += d.y;
    }
  }
  for (; i < end; i += step) {
    const double2 d = t.Use(i, t.Load(i));
    acc.x += d.x;
    acc.y += d.y;
  }
  return acc;
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

// The block's sum of f(k) over k < chunks (0 for none), for every thread.
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

// BatchNormSums' terms: x and x^2, taken in double as the CPU's.
struct SumsTerms {
  const float* x;
  __device__ void ForChannel(int64_t) {}
  __device__ float2 Load(int64_t i) const { return make_float2(x[i], 0.0f); }
  __device__ double2 Use(int64_t, float2 v) const {
    const double d = v.x;
    return make_double2(d, d * d);
  }
};

// BatchNormSums' outputs: the sums, and the count (once, by one thread).
struct SumsOut {
  float* sum;
  float* sum_sq;
  float* count;
  int64_t rows;
  __device__ void Once() const { *count = static_cast<float>(rows); }
  __device__ void operator()(int64_t c, double a, double b) const {
    sum[c] = static_cast<float>(a);
    sum_sq[c] = static_cast<float>(b);
  }
};

// BatchNormFromSumsGrad's terms: dy and dy xhat, xhat = (x - mean) inv_std
// in float and the product in double, as on the CPU. Writes dx = gamma
// inv_std dy on the way, since it needs no sums.
struct GradTerms {
  const float* dy;
  const float* x;
  const float* gamma;
  const float* mean;
  const float* inv_std;
  float* dx;
  float m = 0.0f, is = 0.0f, k = 0.0f;
  __device__ void ForChannel(int64_t c) {
    m = mean[c];
    is = inv_std[c];
    k = gamma[c] * is;
  }
  __device__ float2 Load(int64_t i) const { return make_float2(dy[i], x[i]); }
  __device__ double2 Use(int64_t i, float2 v) const {
    dx[i] = k * v.x;
    const float xhat = (v.y - m) * is;
    return make_double2(v.x, static_cast<double>(v.x) * xhat);
  }
};

// BatchNormFromSumsGrad's per-channel outputs from the sums of dy and dy
// xhat, in the CPU's order of operations.
struct GradOut {
  const float* gamma;
  const float* mean;
  const float* inv_std;
  const float* count;
  float* dgamma;
  float* dbeta;
  float* dsum;
  float* dsum_sq;
  __device__ void Once() const {}
  __device__ void operator()(int64_t c, double sum_dy, double sum_dyx) const {
    const double n = CountOf(count);
    const float g = gamma[c], is = inv_std[c];
    dbeta[c] = static_cast<float>(sum_dy);
    dgamma[c] = static_cast<float>(sum_dyx);
    const double dmean = -static_cast<double>(g) * is * sum_dy;
    const double dvar = -0.5 * g * static_cast<double>(is) * is * sum_dyx;
    dsum[c] = static_cast<float>((dmean - 2.0 * mean[c] * dvar) / n);
    dsum_sq[c] = static_cast<float>(dvar / n);
  }
};

// A chunk's two sums per channel. With one chunk these are the column's and
// `out` stores them; otherwise they go to `partial`.
template <typename Terms, typename Out>
__global__ void ColumnSumsKernel(Terms terms, Out out, int64_t rows, int64_t channels, int64_t rows_per_chunk,
                                 double* __restrict__ partial) {
  __shared__ double red[kThreads];
  const Span s = ThreadSpan(rows, channels, rows_per_chunk);
  if (s.active) terms.ForChannel(s.c);
  const double2 t = ThreadSums(terms, s, channels);
  const double a = ColumnTotal(red, t.x);
  const double b = ColumnTotal(red, t.y);
  if (!s.active || threadIdx.y != 0) return;
  if (gridDim.y > 1) {
    partial[blockIdx.y * channels + s.c] = a;
    partial[(gridDim.y + blockIdx.y) * channels + s.c] = b;
    return;
  }
  if (s.c == 0) out.Once();
  out(s.c, a, b);
}

// A block of kThreads per channel: the chunks' partials added in a fixed
// order (none: zero sums, for a batch with no rows).
template <typename Out>
__global__ void CombineChunksKernel(const double* __restrict__ partial, int64_t channels, int64_t chunks, Out out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out.Once();
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    const double* as = partial + c;
    const double* bs = partial + chunks * channels + c;
    const double a = BlockChunkSum(chunks, [&](int64_t k) { return as[k * channels]; });
    const double b = BlockChunkSum(chunks, [&](int64_t k) { return bs[k * channels]; });
    if (threadIdx.x == 0) out(c, a, b);
  }
}

// The column reduction behind BatchNormSums and BatchNormFromSumsGrad: one
// launch for one chunk, else partials and their combination; no rows, the
// combination alone (zero sums).
template <typename Terms, typename Out>
cudaError_t LaunchColumnSums(const Terms& terms, const Out& out, int64_t rows, int64_t channels, float* scratch,
                             cudaStream_t stream) {
  const Layout l = LayoutFor(rows, channels);
  double* partial = reinterpret_cast<double*>(scratch);
  if (l.chunks > 0) {
    ColumnSumsKernel<<<l.grid(), l.block(), 0, stream>>>(terms, out, rows, channels, l.rows_per_chunk, partial);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess || l.chunks == 1) return err;
  }
  CombineChunksKernel<<<ChannelBlocks(channels), kThreads, 0, stream>>>(partial, channels, l.chunks, out);
  return cudaGetLastError();
}

// dx = g_sum + 2 x g_sum_squares over the thread's rows.
__global__ void SumsGradKernel(const float* __restrict__ x, const float* __restrict__ g_sum,
                               const float* __restrict__ g_sum_sq, int64_t rows, int64_t channels,
                               int64_t rows_per_chunk, float* __restrict__ dx) {
  const Span s = ThreadSpan(rows, channels, rows_per_chunk);
  if (!s.active) return;
  const float a = g_sum[s.c], b = g_sum_sq[s.c];
  for (int64_t r = s.begin; r < s.end; r += blockDim.y) {
    const int64_t i = r * channels + s.c;
    dx[i] = a + 2.0f * x[i] * b;
  }
}

// Every thread takes its channel's statistics from the global sums (a few
// double operations, cheaper than a launch to share them); row lane 0 of
// the first chunk stores them. Then y = x scale + shift over its rows.
__global__ void FromSumsKernel(const float* __restrict__ x, const float* __restrict__ gamma,
                               const float* __restrict__ beta, const float* __restrict__ sum,
                               const float* __restrict__ sum_sq, const float* __restrict__ count, float eps,
                               int64_t rows, int64_t channels, int64_t rows_per_chunk, float* __restrict__ y,
                               float* __restrict__ mean, float* __restrict__ var, float* __restrict__ inv_std) {
  const Span s = ThreadSpan(rows, channels, rows_per_chunk);
  if (!s.active) return;
  const double n = CountOf(count);
  const double m = sum[s.c] / n;
  const double v = sum_sq[s.c] / n - m * m;
  const double biased = v < 0.0 ? 0.0 : v;  // std::max(v, 0.0): a NaN stays NaN
  const double is = 1.0 / sqrt(biased + eps);
  const float scale = static_cast<float>(gamma[s.c] * is);
  const float shift = static_cast<float>(beta[s.c] - m * scale);
  if (blockIdx.y == 0 && threadIdx.y == 0) {
    const double unbias = n > 1.0 ? n / (n - 1.0) : 1.0;
    mean[s.c] = static_cast<float>(m);
    var[s.c] = static_cast<float>(biased * unbias);
    inv_std[s.c] = static_cast<float>(is);
  }
  for (int64_t r = s.begin; r < s.end; r += blockDim.y) {
    const int64_t i = r * channels + s.c;
    y[i] = x[i] * scale + shift;
  }
}

}  // namespace

int64_t BatchNormSumsScratchFloats(int64_t rows, int64_t channels) {
  const Layout l = LayoutFor(rows, channels);
  return l.chunks > 1 ? 4 * l.chunks * channels : 0;  // two doubles per chunk and channel
}

cudaError_t LaunchBatchNormSums(const float* x, int64_t rows, int64_t channels, float* scratch, float* sum,
                                float* sum_squares, float* count, cudaStream_t stream) {
  return LaunchColumnSums(SumsTerms{x}, SumsOut{sum, sum_squares, count, rows}, rows, channels, scratch, stream);
}

cudaError_t LaunchBatchNormSumsGrad(const float* x, const float* g_sum, const float* g_sum_squares, int64_t rows,
                                    int64_t channels, float* dx, cudaStream_t stream) {
  if (rows == 0 || channels == 0) return cudaSuccess;
  const Layout l = LayoutFor(rows, channels);
  SumsGradKernel<<<l.grid(), l.block(), 0, stream>>>(x, g_sum, g_sum_squares, rows, channels, l.rows_per_chunk, dx);
  return cudaGetLastError();
}

cudaError_t LaunchBatchNormFromSums(const float* x, const float* gamma, const float* beta, const float* sum,
                                    const float* sum_squares, const float* count, int64_t rows, int64_t channels,
                                    float epsilon, float* y, float* mean, float* variance, float* inv_std,
                                    cudaStream_t stream) {
  if (channels == 0) return cudaSuccess;
  Layout l = LayoutFor(rows, channels);
  if (l.chunks == 0) l.chunks = 1;  // no rows here, but the statistics (of other replicas' rows) still
  FromSumsKernel<<<l.grid(), l.block(), 0, stream>>>(x, gamma, beta, sum, sum_squares, count, epsilon, rows,
                                                     channels, l.rows_per_chunk, y, mean, variance, inv_std);
  return cudaGetLastError();
}

cudaError_t LaunchBatchNormFromSumsGrad(const float* dy, const float* x, const float* gamma, const float* mean,
                                        const float* inv_std, const float* count, int64_t rows, int64_t channels,
                                        float* scratch, float* dx, float* dgamma, float* dbeta, float* dsum,
                                        float* dsum_squares, cudaStream_t stream) {
  if (channels == 0) return cudaSuccess;
  GradTerms terms{dy, x, gamma, mean, inv_std, dx};
  GradOut out{gamma, mean, inv_std, count, dgamma, dbeta, dsum, dsum_squares};
  return LaunchColumnSums(terms, out, rows, channels, scratch, stream);
}

}  // namespace gpu_kernels
}  // namespace weft
