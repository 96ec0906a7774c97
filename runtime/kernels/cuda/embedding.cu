// Embedding lookups and their gradient on the GPU: `n` ids (float32 whole
// numbers or int32) naming rows of a [rows, width] table.
//
// The lookup: a thread per output element (grid-stride), coalesced along
// each row. The gradient zeroes dparams and then adds every element of g
// into its id's row with atomicAdd: repeated ids meet in the same elements,
// and the float sums' order, so their last bits, may differ from run to run
// (the CPU's is fixed). A deterministic form would sort the ids first.
//
// An id that is not a whole number in [0, rows) is recorded (the first one
// only) in the caller's host-mapped `error` [flag, position, value, rows],
// as reduce.cu records a bad label; the lookup writes NaN for its row, and
// the gradient leaves it out.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/cuda/launch_util.cuh"

namespace weft {
namespace gpu_kernels {
namespace {

// The row an id names, or -1 (the CPU's rule: NaN, fractions and values out
// of range name none).
__device__ __forceinline__ int64_t RowOf(float v, int64_t rows) {
  if (!(v >= 0.0f) || floorf(v) != v || static_cast<double>(v) >= static_cast<double>(rows)) return -1;
  return static_cast<int64_t>(v);
}
__device__ __forceinline__ int64_t RowOf(int32_t v, int64_t rows) { return v >= 0 && v < rows ? v : -1; }

// error: host-mapped [flag, position, value (a double's bits), rows]; flag 1
// while the first bad id is being recorded, 2 once the rest are visible.
__device__ void RecordBadId(int64_t* error, int64_t position, double value, int64_t rows) {
  if (error == nullptr) return;
  auto* e = reinterpret_cast<unsigned long long*>(error);  // NOLINT(runtime/int): the atomics' type
  if (atomicCAS_system(&e[0], 0ull, 1ull) == 0ull) {
    error[1] = position;
    error[2] = __double_as_longlong(value);
    error[3] = rows;
    __threadfence_system();
    atomicExch_system(&e[0], 2ull);
  }
}

template <typename Id>
__global__ void EmbeddingKernel(const float* __restrict__ params, const Id* __restrict__ ids, int64_t n,
                                int64_t rows, int64_t width, float* __restrict__ out, int64_t* error) {
  WEFT_GRID_STRIDE(i, n * width) {
    const int64_t p = i / width;
    const int64_t c = i - p * width;
    const Id id = ids[p];
    const int64_t row = RowOf(id, rows);
    if (row < 0) {
      out[i] = NAN;
      if (c == 0) RecordBadId(error, p, static_cast<double>(id), rows);
      continue;
    }
    out[i] = params[row * width + c];
  }
}

template <typename Id>
__global__ void EmbeddingGradKernel(const Id* __restrict__ ids, const float* __restrict__ g, int64_t n, int64_t rows,
                                    int64_t width, float* __restrict__ dparams, int64_t* error) {
  WEFT_GRID_STRIDE(i, n * width) {
    const int64_t p = i / width;
    const int64_t c = i - p * width;
    const Id id = ids[p];
    const int64_t row = RowOf(id, rows);
    if (row < 0) {
      if (c == 0) RecordBadId(error, p, static_cast<double>(id), rows);
      continue;
    }
    atomicAdd(&dparams[row * width + c], g[i]);
  }
}

template <typename Id>
cudaError_t LaunchLookup(const float* params, const Id* ids, int64_t n, int64_t rows, int64_t width, float* out,
                         int64_t* error, cudaStream_t stream) {
  if (n == 0 || width == 0) return cudaSuccess;
  EmbeddingKernel<Id><<<BlocksFor(n * width), kThreads, 0, stream>>>(params, ids, n, rows, width, out, error);
  return cudaGetLastError();
}

template <typename Id>
cudaError_t LaunchScatterAdd(const Id* ids, const float* g, int64_t n, int64_t rows, int64_t width,
                             float* dparams, int64_t* error, cudaStream_t stream) {
  if (rows * width == 0) return cudaSuccess;
  cudaError_t err = cudaMemsetAsync(dparams, 0, rows * width * sizeof(float), stream);
  if (err != cudaSuccess || n == 0) return err;
  EmbeddingGradKernel<Id><<<BlocksFor(n * width), kThreads, 0, stream>>>(ids, g, n, rows, width, dparams, error);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchEmbedding(const float* params, const float* ids, int64_t n, int64_t rows, int64_t width,
                            float* out, int64_t* error, cudaStream_t stream) {
  return LaunchLookup(params, ids, n, rows, width, out, error, stream);
}

cudaError_t LaunchEmbedding(const float* params, const int32_t* ids, int64_t n, int64_t rows, int64_t width,
                            float* out, int64_t* error, cudaStream_t stream) {
  return LaunchLookup(params, ids, n, rows, width, out, error, stream);
}

cudaError_t LaunchEmbeddingGrad(const float* ids, const float* g, int64_t n, int64_t rows, int64_t width,
                                float* dparams, int64_t* error, cudaStream_t stream) {
  return LaunchScatterAdd(ids, g, n, rows, width, dparams, error, stream);
}

cudaError_t LaunchEmbeddingGrad(const int32_t* ids, const float* g, int64_t n, int64_t rows, int64_t width,
                                float* dparams, int64_t* error, cudaStream_t stream) {
  return LaunchScatterAdd(ids, g, n, rows, width, dparams, error, stream);
}

}  // namespace gpu_kernels
}  // namespace weft
