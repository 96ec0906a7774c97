// Checks and attribute parsing shared by the CPU kernels (kernels/cpu/) and
// the CUDA kernels (kernels/cuda/): nothing here touches a payload, so a bad
// input gets the same error on either device. Each check returns
// INVALID_ARGUMENT naming the operand or attribute at fault.
//
// Thread-safety: pure functions.
#ifndef WEFT_RUNTIME_KERNELS_KERNEL_CHECKS_H_
#define WEFT_RUNTIME_KERNELS_KERNEL_CHECKS_H_

#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/checked_math.h"
#include "common/tensor.h"
#include "graph/attr.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace kernels {

// Stores the value of `v` in *out, or records its error on `c`. For use in a
// kernel's constructor: `if (!GetAttr(c, GetIntAttr(c->def(), "k"), &k_)) return;`
template <typename T>
bool GetAttr(OpKernelConstruction* c, absl::StatusOr<T> v, T* out) {
  if (!v.ok()) {
    c->SetStatus(v.status());
    return false;
  }
  *out = *std::move(v);
  return true;
}

inline absl::Status ExpectSameShape(const Tensor& a, const Tensor& b, absl::string_view role_a,
                                    absl::string_view role_b) {
  if (a.shape() != b.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(role_a, " ", a.shape().DebugString(), " and ", role_b, " ",
                                                   b.shape().DebugString(), " must have the same shape"));
  }
  return absl::OkStatus();
}

inline absl::Status ExpectDType(const Tensor& t, DType want, absl::string_view role) {
  if (t.dtype() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(role, " must be ", DTypeName(want), ", got ", DTypeName(t.dtype())));
  }
  return absl::OkStatus();
}

inline absl::Status ExpectRank(const Tensor& t, int rank, absl::string_view role) {
  if (t.shape().rank() != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(role, " must have rank ", rank, ", got shape ", t.shape().DebugString()));
  }
  return absl::OkStatus();
}

// ConcatRows' output shape from its inputs (shared by the CPU and GPU
// kernels): every shard must match the first one's dtype, rank and trailing
// dims, or the copies would run past the output, and the summed rows must
// fit in 64 bits. Checked here as well as in the shape function because a
// graph whose inference was skipped reaches the kernel unchecked.
inline absl::StatusOr<TensorShape> ConcatRowsOutputShape(OpKernelContext* ctx) {
  const Tensor& first = ctx->input(0);
  if (first.shape().rank() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("shard 0 ", first.shape().DebugString(), " must have rank >= 1"));
  }
  int64_t rows = 0;
  for (int i = 0; i < ctx->num_inputs(); ++i) {
    const Tensor& t = ctx->input(i);
    bool same = t.dtype() == first.dtype() && t.shape().rank() == first.shape().rank();
    for (int d = 1; same && d < t.shape().rank(); ++d) same = t.shape().dim(d) == first.shape().dim(d);
    if (!same) {
      return absl::InvalidArgumentError(absl::StrCat("shard ", i, " ", DTypeName(t.dtype()), t.shape().DebugString(),
                                                     " does not match shard 0 ", DTypeName(first.dtype()),
                                                     first.shape().DebugString(), " past dim 0"));
    }
    if (!CheckedAdd(rows, t.shape().dim(0), &rows)) {
      return absl::InvalidArgumentError(absl::StrCat("the shards' rows overflow 64 bits at shard ", i));
    }
  }
  TensorShape out = first.shape();
  out.set_dim(0, rows);
  return out;
}

// SliceRows' attributes begin and size, read at construction: both >= 0 and
// begin + size within 64 bits.
inline absl::Status GetSliceRowsAttrs(const NodeDef& def, int64_t* begin, int64_t* size) {
  absl::StatusOr<int64_t> b = GetIntAttr(def, "begin");
  if (!b.ok()) return b.status();
  absl::StatusOr<int64_t> n = GetIntAttr(def, "size");
  if (!n.ok()) return n.status();
  int64_t end;
  if (*b < 0 || *n < 0 || !CheckedAdd(*b, *n, &end)) {
    return absl::InvalidArgumentError(absl::StrCat("attributes begin ", *b, " and size ", *n,
                                                   " must be >= 0 with begin + size within 64 bits"));
  }
  *begin = *b;
  *size = *n;
  return absl::OkStatus();
}

// SliceRows at run time: rows [begin, begin + size) inside x, which has rank
// >= 1. Returns the offset of row `begin` in bytes (x was allocated, so a
// row's size and the offset fit).
inline absl::StatusOr<size_t> SliceRowsOffset(const Tensor& x, int64_t begin, int64_t size) {
  if (x.shape().rank() < 1 || !RangeWithin(begin, size, x.shape().dim(0))) {
    return absl::InvalidArgumentError(absl::StrCat("rows [", begin, ", +", size,
                                                   ") (attributes begin, size) are outside ", x.shape().DebugString()));
  }
  const size_t row_bytes = x.shape().dim(0) > 0 ? x.TotalBytes() / static_cast<size_t>(x.shape().dim(0)) : 0;
  return row_bytes * static_cast<size_t>(begin);
}

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_KERNEL_CHECKS_H_
