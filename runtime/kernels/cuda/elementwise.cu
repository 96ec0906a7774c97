// Elementwise kernels: activations and their gradients, Add/Sub/Mul/Neg,
// BiasAdd, AddN, ScaleRows, SumGrad/MeanGrad fills, Cast, Equal, Dropout.
// One launch per op; every output element is written.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <climits>
#include <type_traits>

#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/cuda/launch_util.cuh"

namespace weft {
namespace gpu_kernels {
namespace {

template <UnaryFn F>
__device__ __forceinline__ float ApplyUnary(float x) {
  if constexpr (F == UnaryFn::kRelu) {
    return fmaxf(x, 0.0f);
  } else if constexpr (F == UnaryFn::kSigmoid) {
    return 1.0f / (1.0f + expf(-x));
  } else if constexpr (F == UnaryFn::kTanh) {
    return tanhf(x);
  } else {
    return -x;
  }
}

template <UnaryFn F>
__global__ void UnaryKernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  WEFT_GRID_STRIDE(i, n) { y[i] = ApplyUnary<F>(x[i]); }
}

template <BinaryFn F>
__device__ __forceinline__ float ApplyBinary(float a, float b) {
  if constexpr (F == BinaryFn::kAdd) {
    return a + b;
  } else if constexpr (F == BinaryFn::kSub) {
    return a - b;
  } else if constexpr (F == BinaryFn::kMul) {
    return a * b;
  } else if constexpr (F == BinaryFn::kReluGrad) {
    return b > 0.0f ? a : 0.0f;
  } else if constexpr (F == BinaryFn::kSigmoidGrad) {
    return b * a * (1.0f - a);
  } else {
    return b * (1.0f - a * a);
  }
}

template <BinaryFn F, bool kScalarB>
__global__ void BinaryKernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
                             int64_t n) {
  if (kScalarB) {
    const float s = b[0];
    WEFT_GRID_STRIDE(i, n) { out[i] = ApplyBinary<F>(a[i], s); }
  } else {
    WEFT_GRID_STRIDE(i, n) { out[i] = ApplyBinary<F>(a[i], b[i]); }
  }
}

template <BinaryFn F>
cudaError_t Binary(const float* a, const float* b, bool b_scalar, float* out, int64_t n, cudaStream_t stream) {
  if (b_scalar) {
    BinaryKernel<F, true><<<BlocksFor(n), kThreads, 0, stream>>>(a, b, out, n);
  } else {
    BinaryKernel<F, false><<<BlocksFor(n), kThreads, 0, stream>>>(a, b, out, n);
  }
  return cudaGetLastError();
}

__global__ void BiasAddKernel(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
                              int64_t n, int64_t cols) {
  WEFT_GRID_STRIDE(i, n) { out[i] = x[i] + bias[i % cols]; }
}

struct AddNArgs {
  const float* in[kAddNMaxInputs];
};

__global__ void AddNKernel(AddNArgs args, int count, bool accumulate, float* __restrict__ out, int64_t n) {
  WEFT_GRID_STRIDE(i, n) {
    // Left to right, as the CPU sums.
    float s = accumulate ? out[i] + args.in[0][i] : args.in[0][i];
    for (int k = 1; k < count; ++k) s += args.in[k][i];
    out[i] = s;
  }
}

__global__ void ScaleRowsKernel(const float* __restrict__ m, const float* __restrict__ s, float* __restrict__ out,
                                int64_t n, int64_t cols) {
  WEFT_GRID_STRIDE(i, n) { out[i] = m[i] * s[i / cols]; }
}

__global__ void FillFromScalarKernel(const float* __restrict__ g, bool divide, float* __restrict__ out, int64_t n) {
  float v = g[0];
  if (divide && n > 0) v /= static_cast<float>(n);
  WEFT_GRID_STRIDE(i, n) { out[i] = v; }
}

template <typename T>
struct IntLimits;
template <>
struct IntLimits<int32_t> {
  static constexpr int32_t kMin = INT32_MIN, kMax = INT32_MAX;
};
template <>
struct IntLimits<int64_t> {
  static constexpr int64_t kMin = INT64_MIN, kMax = INT64_MAX;
};

// Float to integer saturates and maps NaN to 0, as the CPU's Convert.
template <typename To, typename From>
__device__ __forceinline__ To Convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    if (isnan(v)) return 0;
    if (v <= static_cast<From>(IntLimits<To>::kMin)) return IntLimits<To>::kMin;
    if (v >= static_cast<From>(IntLimits<To>::kMax)) return IntLimits<To>::kMax;
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

template <typename From, typename To>
__global__ void CastKernel(const From* __restrict__ x, To* __restrict__ y, int64_t n) {
  WEFT_GRID_STRIDE(i, n) { y[i] = Convert<To>(x[i]); }
}

template <typename From, typename To>
cudaError_t Cast(const void* x, void* y, int64_t n, cudaStream_t stream) {
  CastKernel<From, To><<<BlocksFor(n), kThreads, 0, stream>>>(static_cast<const From*>(x), static_cast<To*>(y), n);
  return cudaGetLastError();
}

template <typename From>
cudaError_t CastFrom(ElemType to, const void* x, void* y, int64_t n, cudaStream_t stream) {
  switch (to) {
    case ElemType::kFloat32: return Cast<From, float>(x, y, n, stream);
    case ElemType::kInt32: return Cast<From, int32_t>(x, y, n, stream);
    case ElemType::kInt64: return Cast<From, int64_t>(x, y, n, stream);
    case ElemType::kBool: return Cast<From, bool>(x, y, n, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
__global__ void EqualKernel(const T* __restrict__ x, const T* __restrict__ y, bool* __restrict__ out, int64_t n) {
  WEFT_GRID_STRIDE(i, n) { out[i] = x[i] == y[i]; }
}

template <typename T>
cudaError_t Equal(const void* x, const void* y, bool* out, int64_t n, cudaStream_t stream) {
  EqualKernel<T><<<BlocksFor(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(y), out, n);
  return cudaGetLastError();
}

// SplitMix64's output function, as runtime/kernels/cpu/nn_kernels.cc.
__device__ __forceinline__ uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One 64-bit draw per pair of elements, as on the CPU.
__device__ __forceinline__ void DropoutPairs(const float* __restrict__ x, float* __restrict__ y,
                                             float* __restrict__ mask, int64_t n, uint64_t key, uint32_t threshold,
                                             float scale) {
  const int64_t pairs = (n + 1) / 2;
  WEFT_GRID_STRIDE(j, pairs) {
    const uint64_t r = Mix(key + static_cast<uint64_t>(j) * 0x9E3779B97F4A7C15ull);
    const int64_t i = 2 * j;
    const float m0 = static_cast<uint32_t>(r) >= threshold ? scale : 0.0f;
    mask[i] = m0;
    y[i] = x[i] * m0;
    if (i + 1 < n) {
      const float m1 = static_cast<uint32_t>(r >> 32) >= threshold ? scale : 0.0f;
      mask[i + 1] = m1;
      y[i + 1] = x[i + 1] * m1;
    }
  }
}

__global__ void DropoutKernel(const float* __restrict__ x, float* __restrict__ y, float* __restrict__ mask,
                              int64_t n, uint64_t key, uint32_t threshold, float scale) {
  DropoutPairs(x, y, mask, n, key, threshold, scale);
}

// The key computed from the step id in device memory, as
// DropoutParams::StepKey computes it on the host.
__global__ void DropoutAtStepKernel(const float* __restrict__ x, float* __restrict__ y, float* __restrict__ mask,
                                    int64_t n, const int64_t* __restrict__ step, uint64_t seed, uint64_t name_hash,
                                    uint32_t threshold, float scale) {
  DropoutPairs(x, y, mask, n, Mix(seed ^ Mix(name_hash ^ Mix(static_cast<uint64_t>(*step)))), threshold, scale);
}

}  // namespace

cudaError_t LaunchUnary(UnaryFn fn, const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int blocks = BlocksFor(n);
  switch (fn) {
    case UnaryFn::kRelu: UnaryKernel<UnaryFn::kRelu><<<blocks, kThreads, 0, stream>>>(x, y, n); break;
    case UnaryFn::kSigmoid: UnaryKernel<UnaryFn::kSigmoid><<<blocks, kThreads, 0, stream>>>(x, y, n); break;
    case UnaryFn::kTanh: UnaryKernel<UnaryFn::kTanh><<<blocks, kThreads, 0, stream>>>(x, y, n); break;
    case UnaryFn::kNeg: UnaryKernel<UnaryFn::kNeg><<<blocks, kThreads, 0, stream>>>(x, y, n); break;
  }
  return cudaGetLastError();
}

cudaError_t LaunchBinary(BinaryFn fn, const float* a, const float* b, bool b_scalar, float* out, int64_t n,
                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (fn) {
    case BinaryFn::kAdd: return Binary<BinaryFn::kAdd>(a, b, b_scalar, out, n, stream);
    case BinaryFn::kSub: return Binary<BinaryFn::kSub>(a, b, b_scalar, out, n, stream);
    case BinaryFn::kMul: return Binary<BinaryFn::kMul>(a, b, b_scalar, out, n, stream);
    case BinaryFn::kReluGrad: return Binary<BinaryFn::kReluGrad>(a, b, b_scalar, out, n, stream);
    case BinaryFn::kSigmoidGrad: return Binary<BinaryFn::kSigmoidGrad>(a, b, b_scalar, out, n, stream);
    case BinaryFn::kTanhGrad: return Binary<BinaryFn::kTanhGrad>(a, b, b_scalar, out, n, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchBiasAdd(const float* x, const float* bias, float* out, int64_t rows, int64_t cols,
                          cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  BiasAddKernel<<<BlocksFor(n), kThreads, 0, stream>>>(x, bias, out, n, cols);
  return cudaGetLastError();
}

cudaError_t LaunchAddN(const float* const* in, int count, bool accumulate, float* out, int64_t n,
                       cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (count < 1 || count > kAddNMaxInputs) return cudaErrorInvalidValue;
  AddNArgs args{};
  for (int k = 0; k < count; ++k) args.in[k] = in[k];
  AddNKernel<<<BlocksFor(n), kThreads, 0, stream>>>(args, count, accumulate, out, n);
  return cudaGetLastError();
}

cudaError_t LaunchScaleRows(const float* m, const float* s, float* out, int64_t rows, int64_t cols,
                            cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  ScaleRowsKernel<<<BlocksFor(n), kThreads, 0, stream>>>(m, s, out, n, cols);
  return cudaGetLastError();
}

cudaError_t LaunchFillFromScalar(const float* g, bool divide_by_n, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FillFromScalarKernel<<<BlocksFor(n), kThreads, 0, stream>>>(g, divide_by_n, out, n);
  return cudaGetLastError();
}

bool CastSupported(ElemType from, ElemType to) {
  auto ok = [](ElemType t) {
    return t == ElemType::kFloat32 || t == ElemType::kInt32 || t == ElemType::kInt64 || t == ElemType::kBool;
  };
  return ok(from) && ok(to);
}

cudaError_t LaunchCast(ElemType from, ElemType to, const void* x, void* y, int64_t n, cudaStream_t stream) {
  if (!CastSupported(from, to)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  switch (from) {
    case ElemType::kFloat32: return CastFrom<float>(to, x, y, n, stream);
    case ElemType::kInt32: return CastFrom<int32_t>(to, x, y, n, stream);
    case ElemType::kInt64: return CastFrom<int64_t>(to, x, y, n, stream);
    case ElemType::kBool: return CastFrom<bool>(to, x, y, n, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchEqual(ElemType type, const void* x, const void* y, bool* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (type) {
    case ElemType::kFloat32: return Equal<float>(x, y, out, n, stream);
    case ElemType::kInt32: return Equal<int32_t>(x, y, out, n, stream);
    case ElemType::kInt64: return Equal<int64_t>(x, y, out, n, stream);
    case ElemType::kBool: return Equal<bool>(x, y, out, n, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchDropout(const float* x, float* y, float* mask, int64_t n, uint64_t key, uint32_t threshold,
                          float scale, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  DropoutKernel<<<BlocksFor((n + 1) / 2), kThreads, 0, stream>>>(x, y, mask, n, key, threshold, scale);
  return cudaGetLastError();
}

cudaError_t LaunchDropoutAtStep(const float* x, float* y, float* mask, int64_t n, const int64_t* step, uint64_t seed,
                                uint64_t name_hash, uint32_t threshold, float scale, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  DropoutAtStepKernel<<<BlocksFor((n + 1) / 2), kThreads, 0, stream>>>(x, y, mask, n, step, seed, name_hash,
                                                                       threshold, scale);
  return cudaGetLastError();
}

}  // namespace gpu_kernels
}  // namespace weft
