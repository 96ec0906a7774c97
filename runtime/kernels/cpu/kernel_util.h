// Helpers shared by the CPU kernels: Eigen views of tensor payloads, attribute
// parsing at construction, run-time shape checks, and a ParallelFor that stays
// on the caller for small work or a pool without threads.
#ifndef WEFT_RUNTIME_KERNELS_CPU_KERNEL_UTIL_H_
#define WEFT_RUNTIME_KERNELS_CPU_KERNEL_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <utility>

#include "Eigen/Core"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/checked_math.h"
#include "common/tensor.h"
#include "graph/attr.h"
#include "common/thread_pool.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<RowMatrix>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

inline ConstArrayMap AsArray(const Tensor& t) { return ConstArrayMap(t.data<float>(), t.NumElements()); }
inline ArrayMap AsArray(Tensor* t) { return ArrayMap(t->data<float>(), t->NumElements()); }

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

// The first error of the blocks of a ParallelFor, which cannot return early
// through OP_REQUIRES. Thread-safe.
class FirstError {
 public:
  void Update(const absl::Status& s) {
    if (s.ok()) return;
    absl::MutexLock lock(&mu_);
    if (status_.ok()) status_ = s;
  }
  absl::Status status() const {
    absl::MutexLock lock(&mu_);
    return status_;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// Runs fn(begin, end) over [0, n), split across the device's intra-op pool
// when it has threads and the work (n * cost_per_item, in rough flops) is big
// enough to pay for the hand-off; otherwise calls fn(0, n) on the caller.
template <typename Fn>
void ParallelFor(OpKernelContext* ctx, int64_t n, double cost_per_item, Fn&& fn) {
  constexpr double kMinParallelCost = 1 << 17;
  ThreadPool* pool = ctx->intra_op_pool();
  if (n <= 1 || pool == nullptr || pool->num_threads() == 0 || n * cost_per_item < kMinParallelCost) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  const int64_t min_block = std::max<int64_t>(1, static_cast<int64_t>(kMinParallelCost / 4 / cost_per_item));
  pool->ParallelFor(n, min_block, [&fn](int64_t begin, int64_t end) { fn(begin, end); });
}

}  // namespace cpu
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_CPU_KERNEL_UTIL_H_
