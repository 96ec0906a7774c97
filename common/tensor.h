// Tensor: a dtype, a shape and a reference-counted, 64-byte-aligned buffer.
//
// Copying a Tensor shares its buffer (one atomic increment); DeepCopy makes a
// new one, and View a tensor over an aligned part of the same one (as
// UnpackTensors hands out the parts of a packed transfer). Kernels that want
// to write into an input in place check `RefCountIsOne()` first. A
// default-constructed Tensor is uninitialised.
//
// Thread-safety: distinct Tensor objects may be used from different threads
// even when they share a buffer; synchronising writes to the shared payload is
// the caller's business (the executor orders them by graph edges).
#ifndef WEFT_COMMON_TENSOR_H_
#define WEFT_COMMON_TENSOR_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/allocator.h"
#include "common/dtype.h"

namespace weft {

// A list of dimension sizes. In a concrete tensor every dim is >= 0; graph
// signatures may use -1 for "unknown" (see graph/op_registry.h).
class TensorShape {
 public:
  TensorShape() = default;
  TensorShape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit TensorShape(absl::Span<const int64_t> dims) : dims_(dims.begin(), dims.end()) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[i]; }
  absl::Span<const int64_t> dims() const { return dims_; }
  void AddDim(int64_t size) { dims_.push_back(size); }
  void set_dim(int i, int64_t size) { dims_[i] = size; }
  void RemoveDim(int i) { dims_.erase(dims_.begin() + i); }
  void Clear() { dims_.clear(); }

  // Product of the dims (1 for a scalar); -1 when any dim is unknown or the
  // product does not fit in int64 (a shape from outside can ask for that), so
  // the count never wraps into a small, plausible number. Code that must say
  // why uses CheckedNumElements(dims(), what) from common/checked_math.h.
  int64_t num_elements() const;
  bool IsFullyDefined() const;
  // True when `other` could be this shape once unknown dims are known.
  bool IsCompatibleWith(const TensorShape& other) const;

  std::string DebugString() const;  // "[64,784]"; unknown dims print as "?"

  bool operator==(const TensorShape& o) const { return dims_ == o.dims_; }
  bool operator!=(const TensorShape& o) const { return !(*this == o); }

 private:
  absl::InlinedVector<int64_t, 6> dims_;
};

class Tensor {
 public:
  Tensor() = default;
  // Allocates an uninitialised payload; throws when the allocator cannot.
  // REQUIRES: shape is fully defined and small (a test's, a constant's): a
  // shape that a request, graph or file can influence goes through Allocate.
  Tensor(DType dtype, const TensorShape& shape, Allocator* allocator = CpuAllocator());
  // The same for a shape that comes from outside (a graph, a peer): an
  // unknown or negative dimension, or an element or byte count that
  // overflows, is INVALID_ARGUMENT; a payload larger than MaxTensorBytes()
  // or one the allocator cannot provide (it threw) is RESOURCE_EXHAUSTED;
  // each names the dtype, shape and bytes. Never throws.
  static absl::StatusOr<Tensor> Allocate(DType dtype, const TensorShape& shape,
                                         Allocator* allocator = CpuAllocator());
  // The largest payload Allocate accepts: the process's memory budget
  // (common/memory_budget.h: --memory_limit, else the cgroup's limit, else
  // physical memory).
  static size_t MaxTensorBytes();
  ~Tensor() { if (buf_ != nullptr) buf_->Unref(); }

  Tensor(const Tensor& o)
      : dtype_(o.dtype_), shape_(o.shape_), num_elements_(o.num_elements_), offset_(o.offset_), buf_(o.buf_) {
    if (buf_ != nullptr) buf_->Ref();
  }
  Tensor(Tensor&& o) noexcept
      : dtype_(o.dtype_),
        shape_(std::move(o.shape_)),
        num_elements_(o.num_elements_),
        offset_(o.offset_),
        buf_(o.buf_) {
    o.buf_ = nullptr;
    o.dtype_ = DType::kInvalid;
    o.num_elements_ = 0;
    o.offset_ = 0;
  }
  Tensor& operator=(const Tensor& o);
  Tensor& operator=(Tensor&& o) noexcept;

  // A scalar tensor holding `value` (one element: cannot meaningfully fail).
  template <typename T>
  static Tensor Scalar(T value) {
    Tensor t(DTypeOf<T>::value, TensorShape{});
    *t.data<T>() = value;
    return t;
  }
  // A tensor of `shape` filled from `values` (sizes must agree); allocated
  // through Allocate, so its errors are Allocate's.
  template <typename T>
  static absl::StatusOr<Tensor> FromVector(const TensorShape& shape, absl::Span<const T> values);

  bool IsInitialized() const { return buf_ != nullptr; }
  // False when the payload is device memory (a GPU's allocator): host code
  // must copy it to the host (GpuDevice::CopyDeviceToHost) before reading
  // it. An uninitialised tensor counts as on the host.
  bool on_host() const { return buf_ == nullptr || buf_->on_host(); }
  DType dtype() const { return dtype_; }
  const TensorShape& shape() const { return shape_; }
  int64_t NumElements() const { return num_elements_; }
  size_t TotalBytes() const { return static_cast<size_t>(num_elements_) * DTypeSize(dtype_); }

  template <typename T>
  T* data() { return static_cast<T*>(raw_data()); }
  template <typename T>
  const T* data() const { return static_cast<const T*>(raw_data()); }
  template <typename T>
  absl::Span<T> flat() { return absl::Span<T>(data<T>(), static_cast<size_t>(num_elements_)); }
  template <typename T>
  absl::Span<const T> flat() const {
    return absl::Span<const T>(data<T>(), static_cast<size_t>(num_elements_));
  }
  void* raw_data() { return buf_ == nullptr ? nullptr : static_cast<char*>(buf_->data()) + offset_; }
  const void* raw_data() const { return buf_ == nullptr ? nullptr : static_cast<const char*>(buf_->data()) + offset_; }

  // The same buffer seen with another shape of the same element count.
  absl::StatusOr<Tensor> Reshaped(const TensorShape& shape) const;
  // A `dtype` tensor of `shape` over this one's payload bytes from
  // `byte_offset` on, sharing its buffer: no copy, and the buffer lives as
  // long as any tensor over it. INVALID_ARGUMENT, naming both, when this
  // tensor is uninitialised, `byte_offset` is not a multiple of
  // kTensorAlignment (a view is as aligned as a fresh tensor) or the bytes
  // do not lie inside this tensor's payload.
  absl::StatusOr<Tensor> View(DType dtype, const TensorShape& shape, size_t byte_offset) const;
  // A new buffer with the same contents. REQUIRES: on_host() and a host
  // `allocator`. Throws when the allocator cannot; TryDeepCopy returns
  // Allocate's error instead.
  Tensor DeepCopy(Allocator* allocator = CpuAllocator()) const;
  absl::StatusOr<Tensor> TryDeepCopy(Allocator* allocator = CpuAllocator()) const;
  // True when this Tensor holds the only reference to its buffer, so writing
  // into it cannot be observed elsewhere.
  bool RefCountIsOne() const { return buf_ != nullptr && buf_->RefCountIsOne(); }
  bool SharesBufferWith(const Tensor& o) const { return buf_ != nullptr && buf_ == o.buf_; }

  // "float32[2,3] {1, 2, 3, 4, 5, 6}", at most `max_entries` values;
  // "float32[2,3] {on device}" for a tensor that is not on_host().
  std::string DebugString(int max_entries = 8) const;

 private:
  // Takes `buf` (one reference); Allocate's path, which has checked the sizes.
  Tensor(DType dtype, const TensorShape& shape, int64_t num_elements, Buffer* buf)
      : dtype_(dtype), shape_(shape), num_elements_(num_elements), buf_(buf) {}

  DType dtype_ = DType::kInvalid;
  TensorShape shape_;
  int64_t num_elements_ = 0;
  size_t offset_ = 0;  // of the payload in buf_ (a View's); a multiple of kTensorAlignment
  Buffer* buf_ = nullptr;
};

template <typename T>
absl::StatusOr<Tensor> Tensor::FromVector(const TensorShape& shape, absl::Span<const T> values) {
  if (!shape.IsFullyDefined() || shape.num_elements() != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError("FromVector: " + std::to_string(values.size()) +
                                      " values do not fill shape " + shape.DebugString());
  }
  absl::StatusOr<Tensor> t = Allocate(DTypeOf<T>::value, shape);
  if (!t.ok()) return t.status();
  std::copy(values.begin(), values.end(), t->template data<T>());
  return t;
}

}  // namespace weft

#endif  // WEFT_COMMON_TENSOR_H_
