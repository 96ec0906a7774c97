#include "common/tensor.h"

#include <unistd.h>

#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checked_math.h"
#include "common/memory_budget.h"

namespace weft {

int64_t TensorShape::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims_) {
    if (d < 0) return -1;
  }
  for (int64_t d : dims_) {
    // A zero anywhere makes the product 0 even where a prefix would overflow.
    if (d == 0) return 0;
  }
  for (int64_t d : dims_) {
    if (!CheckedMul(n, d, &n)) return -1;
  }
  return n;
}

bool TensorShape::IsFullyDefined() const {
  for (int64_t d : dims_) {
    if (d < 0) return false;
  }
  return true;
}

bool TensorShape::IsCompatibleWith(const TensorShape& other) const {
  if (rank() != other.rank()) return false;
  for (int i = 0; i < rank(); ++i) {
    if (dims_[i] >= 0 && other.dims_[i] >= 0 && dims_[i] != other.dims_[i]) return false;
  }
  return true;
}

std::string TensorShape::DebugString() const {
  std::string out = "[";
  for (int i = 0; i < rank(); ++i) {
    if (i > 0) out += ",";
    out += dims_[i] < 0 ? "?" : std::to_string(dims_[i]);
  }
  return out + "]";
}

Tensor::Tensor(DType dtype, const TensorShape& shape, Allocator* allocator)
    : dtype_(dtype), shape_(shape), num_elements_(shape.num_elements()) {
  buf_ = allocator->Allocate(static_cast<size_t>(num_elements_) * DTypeSize(dtype));
}

size_t Tensor::MaxTensorBytes() {
  // The daemon's budget (--memory_limit, its cgroup's limit, or physical
  // memory): a tensor larger than that could only end in the OOM killer.
  const uint64_t bytes = MemoryBudgetBytes();
  return bytes > SIZE_MAX ? SIZE_MAX : static_cast<size_t>(bytes);
}

absl::StatusOr<Tensor> Tensor::Allocate(DType dtype, const TensorShape& shape, Allocator* allocator) {
  const std::string what = absl::StrCat("tensor ", DTypeName(dtype), shape.DebugString());
  if (!shape.IsFullyDefined()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot allocate ", what, ": the shape is not fully defined"));
  }
  absl::StatusOr<int64_t> elements = CheckedNumElements(shape.dims(), what);
  if (!elements.ok()) return elements.status();
  absl::StatusOr<size_t> bytes = CheckedByteSize(*elements, DTypeSize(dtype), what);
  if (!bytes.ok()) return bytes.status();
  if (*bytes > MaxTensorBytes()) {
    return absl::ResourceExhaustedError(absl::StrCat(what, " needs ", *bytes, " bytes, more than the ",
                                                     MaxTensorBytes(), " bytes a tensor may use on this machine"));
  }
  // Allocators report exhaustion by throwing (operator new's contract); it
  // stops here so that no caller of Allocate has to catch.
  Buffer* buf = nullptr;
  try {
    buf = allocator->Allocate(*bytes);
  } catch (const std::bad_alloc& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of memory allocating ", what, " (", *bytes, " bytes): ", e.what()));
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("allocating ", what, " (", *bytes, " bytes) failed: ", e.what()));
  }
  if (buf == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("out of memory allocating ", what, " (", *bytes, " bytes)"));
  }
  return Tensor(dtype, shape, *elements, buf);
}

Tensor& Tensor::operator=(const Tensor& o) {
  if (this == &o) return *this;
  if (o.buf_ != nullptr) o.buf_->Ref();
  if (buf_ != nullptr) buf_->Unref();
  dtype_ = o.dtype_;
  shape_ = o.shape_;
  num_elements_ = o.num_elements_;
  offset_ = o.offset_;
  buf_ = o.buf_;
  return *this;
}

Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this == &o) return *this;
  if (buf_ != nullptr) buf_->Unref();
  dtype_ = o.dtype_;
  shape_ = std::move(o.shape_);
  num_elements_ = o.num_elements_;
  offset_ = o.offset_;
  buf_ = o.buf_;
  o.buf_ = nullptr;
  o.dtype_ = DType::kInvalid;
  o.num_elements_ = 0;
  o.offset_ = 0;
  return *this;
}

absl::StatusOr<Tensor> Tensor::Reshaped(const TensorShape& shape) const {
  if (!shape.IsFullyDefined() || shape.num_elements() != num_elements_) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", shape_.DebugString(), " (",
                                                   num_elements_, " elements) to ", shape.DebugString()));
  }
  Tensor t(*this);
  t.shape_ = shape;
  return t;
}

absl::StatusOr<Tensor> Tensor::View(DType dtype, const TensorShape& shape, size_t byte_offset) const {
  // The messages are built only on failure: a view is made per step.
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a view ", DTypeName(dtype), shape.DebugString(), " at byte ", byte_offset,
        IsInitialized() ? absl::StrCat(" of ", DTypeName(dtype_), shape_.DebugString(), " (", TotalBytes(), " bytes)")
                        : std::string(" of no tensor"),
        why.empty() ? "" : ": ", why));
  };
  if (!IsInitialized()) return refuse("");
  if (byte_offset % kTensorAlignment != 0) {
    return refuse(absl::StrCat("the offset is not a multiple of ", kTensorAlignment));
  }
  if (!shape.IsFullyDefined()) return refuse("unknown dims");
  absl::StatusOr<int64_t> elements = CheckedNumElements(shape.dims(), "the view");
  if (!elements.ok()) return refuse(elements.status().message());
  absl::StatusOr<size_t> bytes = CheckedByteSize(*elements, DTypeSize(dtype), "the view");
  if (!bytes.ok()) return refuse(bytes.status().message());
  if (byte_offset > TotalBytes() || *bytes > TotalBytes() - byte_offset) {
    return refuse(absl::StrCat("its ", *bytes, " bytes reach past the end"));
  }
  buf_->Ref();
  Tensor view(dtype, shape, *elements, buf_);
  view.offset_ = offset_ + byte_offset;
  return view;
}

Tensor Tensor::DeepCopy(Allocator* allocator) const {
  if (!IsInitialized()) return Tensor();
  Tensor t(dtype_, shape_, allocator);
  std::memcpy(t.raw_data(), raw_data(), TotalBytes());
  return t;
}

absl::StatusOr<Tensor> Tensor::TryDeepCopy(Allocator* allocator) const {
  if (!IsInitialized()) return Tensor();
  absl::StatusOr<Tensor> t = Allocate(dtype_, shape_, allocator);
  if (!t.ok()) return t.status();
  if (TotalBytes() > 0) std::memcpy(t->raw_data(), raw_data(), TotalBytes());
  return t;
}

std::string Tensor::DebugString(int max_entries) const {
  if (!IsInitialized()) return "<uninitialized tensor>";
  std::string out = absl::StrCat(DTypeName(dtype_), shape_.DebugString(), " {");
  if (!on_host()) return out + "on device}";
  const int64_t n = std::min<int64_t>(num_elements_, max_entries);
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    switch (dtype_) {
      case DType::kFloat32: absl::StrAppend(&out, data<float>()[i]); break;
      case DType::kFloat16: absl::StrAppend(&out, static_cast<float>(data<Half>()[i])); break;
      case DType::kInt32: absl::StrAppend(&out, data<int32_t>()[i]); break;
      case DType::kInt64: absl::StrAppend(&out, data<int64_t>()[i]); break;
      case DType::kBool: absl::StrAppend(&out, data<bool>()[i] ? "true" : "false"); break;
      case DType::kInvalid: break;
    }
  }
  if (num_elements_ > n) out += ", ...";
  return out + "}";
}

}  // namespace weft
