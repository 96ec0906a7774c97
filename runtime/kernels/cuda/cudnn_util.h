// What the cuDNN paths of the window kernels share (cudnn_conv.cc for the
// convolutions, cudnn_pool.cc for max pooling): RAII cuDNN descriptors, a
// per-shape cache of what a first use chose or made, and timing on the
// device's stream. Internal to runtime/kernels/cuda; kernels use
// cudnn_conv.h.
//
// Thread-safety: descriptors are immutable once Init succeeds; ShapeCache
// is thread-safe; a Timer belongs to one thread.
#ifndef WEFT_RUNTIME_KERNELS_CUDA_CUDNN_UTIL_H_
#define WEFT_RUNTIME_KERNELS_CUDA_CUDNN_UTIL_H_

#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/window_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {
namespace cudnn_util {

// cuDNN's alpha and beta scaling factors: out = 1 * result + 0 * out.
inline constexpr float kOne = 1.0f;
inline constexpr float kZero = 0.0f;

// cuDNN's legacy API indexes tensors with 32-bit integers.
inline bool FitsInt(std::initializer_list<int64_t> dims) {
  int64_t elements = 1;
  for (int64_t d : dims) {
    if (d < 1 || d > INT_MAX) return false;
    elements *= d;
    if (elements > INT_MAX) return false;
  }
  return true;
}

// ---- RAII descriptors ----------------------------------------------------------------

class TensorDesc {
 public:
  TensorDesc() = default;
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  ~TensorDesc() {
    if (d_ != nullptr) cudnnDestroyTensorDescriptor(d_);
  }
  // A float tensor [n, h, w, c] in NHWC. cuDNN takes the dims as n, c, h, w
  // whatever the format.
  absl::Status Init(int64_t n, int64_t h, int64_t w, int64_t c) {
    WEFT_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&d_));
    WEFT_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(d_, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, static_cast<int>(n),
                                                          static_cast<int>(c), static_cast<int>(h),
                                                          static_cast<int>(w)));
    return absl::OkStatus();
  }
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

class FilterDesc {
 public:
  FilterDesc() = default;
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
  ~FilterDesc() {
    if (d_ != nullptr) cudnnDestroyFilterDescriptor(d_);
  }
  // A float filter [cout, kh, kw, cin] (KRSC, cuDNN's NHWC filter layout).
  // Note the argument order: data type before format, unlike tensors.
  absl::Status Init(int64_t cout, int64_t kh, int64_t kw, int64_t cin) {
    WEFT_CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&d_));
    WEFT_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(d_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC,
                                                          static_cast<int>(cout), static_cast<int>(cin),
                                                          static_cast<int>(kh), static_cast<int>(kw)));
    return absl::OkStatus();
  }
  cudnnFilterDescriptor_t get() const { return d_; }

 private:
  cudnnFilterDescriptor_t d_ = nullptr;
};

class ConvolutionDesc {
 public:
  ConvolutionDesc() = default;
  ConvolutionDesc(const ConvolutionDesc&) = delete;
  ConvolutionDesc& operator=(const ConvolutionDesc&) = delete;
  ~ConvolutionDesc() {
    if (d_ != nullptr) cudnnDestroyConvolutionDescriptor(d_);
  }
  // Cross-correlation (the CPU kernel does not flip the filter), FP32
  // accumulation, FMA math only: no TF32.
  absl::Status Init(int64_t pad_h, int64_t pad_w, int64_t stride) {
    WEFT_CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&d_));
    WEFT_CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(d_, static_cast<int>(pad_h), static_cast<int>(pad_w),
                                                               static_cast<int>(stride), static_cast<int>(stride),
                                                               /*dilation_h=*/1, /*dilation_w=*/1,
                                                               CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    WEFT_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(d_, CUDNN_FMA_MATH));
    return absl::OkStatus();
  }
  cudnnConvolutionDescriptor_t get() const { return d_; }

 private:
  cudnnConvolutionDescriptor_t d_ = nullptr;
};

class PoolingDesc {
 public:
  PoolingDesc() = default;
  PoolingDesc(const PoolingDesc&) = delete;
  PoolingDesc& operator=(const PoolingDesc&) = delete;
  ~PoolingDesc() {
    if (d_ != nullptr) cudnnDestroyPoolingDescriptor(d_);
  }
  absl::Status Init(const kernels::PoolGeometry& g) {
    WEFT_CUDNN_RETURN_IF_ERROR(cudnnCreatePoolingDescriptor(&d_));
    WEFT_CUDNN_RETURN_IF_ERROR(cudnnSetPooling2dDescriptor(
        d_, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_NOT_PROPAGATE_NAN, static_cast<int>(g.k), static_cast<int>(g.k),
        static_cast<int>(g.pad_top), static_cast<int>(g.pad_left), static_cast<int>(g.stride),
        static_cast<int>(g.stride)));
    return absl::OkStatus();
  }
  cudnnPoolingDescriptor_t get() const { return d_; }

 private:
  cudnnPoolingDescriptor_t d_ = nullptr;
};

// The four descriptors of a convolution.
struct ConvDescs {
  TensorDesc x;  // [n, h, w, cin]
  FilterDesc filter;
  ConvolutionDesc conv;
  TensorDesc y;  // [n, ho, wo, cout]

  absl::Status Init(const kernels::ConvGeometry& g) {
    RETURN_IF_ERROR(x.Init(g.n, g.h, g.w, g.cin));
    RETURN_IF_ERROR(filter.Init(g.cout, g.kh, g.kw, g.cin));
    RETURN_IF_ERROR(conv.Init(g.pad_top, g.pad_left, g.stride));
    return y.Init(g.n, g.ho, g.wo, g.cout);
  }
};

// What was chosen or made for each shape, kept for the process's life (a
// job has a handful of shapes).
template <typename Key, typename Value>
class ShapeCache {
 public:
  bool Lookup(const Key& key, Value* value) {
    absl::MutexLock l(&mu_);
    auto it = values_.find(key);
    if (it == values_.end()) return false;
    *value = it->second;
    return true;
  }
  // Keeps `value` unless another thread cached one first; returns the kept one.
  Value Insert(const Key& key, Value value) {
    absl::MutexLock l(&mu_);
    return values_.emplace(key, std::move(value)).first->second;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<Key, Value> values_ ABSL_GUARDED_BY(mu_);
};

// A pair of CUDA events.
class Timer {
 public:
  Timer() = default;
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  ~Timer() {
    for (cudaEvent_t e : events_) {
      if (e != nullptr) cudaEventDestroy(e);
    }
  }
  absl::Status Init() {
    for (cudaEvent_t& e : events_) WEFT_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
    return absl::OkStatus();
  }
  cudaEvent_t start() const { return events_[0]; }
  cudaEvent_t stop() const { return events_[1]; }
  // REQUIRES: both events recorded.
  absl::StatusOr<float> Milliseconds() const {
    WEFT_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(events_[1]));
    float ms = 0;
    WEFT_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, events_[0], events_[1]));
    return ms;
  }

 private:
  std::array<cudaEvent_t, 2> events_{};
};

// The fastest of a few timed runs of `run` on the device's stream, after
// one untimed run (which loads its kernels and fills the allocator's cache).
template <typename Run>
absl::StatusOr<float> BestMilliseconds(OpKernelContext* ctx, Run run) {
  constexpr int kRepeats = 3;
  RETURN_IF_ERROR(run());
  Timer t;
  RETURN_IF_ERROR(t.Init());
  float best = -1;
  for (int i = 0; i < kRepeats; ++i) {
    WEFT_CUDA_RETURN_IF_ERROR(cudaEventRecord(t.start(), Stream(ctx)));
    RETURN_IF_ERROR(run());
    WEFT_CUDA_RETURN_IF_ERROR(cudaEventRecord(t.stop(), Stream(ctx)));
    ASSIGN_OR_RETURN(const float ms, t.Milliseconds());
    if (best < 0 || ms < best) best = ms;
  }
  return best;
}

}  // namespace cudnn_util
}  // namespace gpu_kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_CUDA_CUDNN_UTIL_H_
