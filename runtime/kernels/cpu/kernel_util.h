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
#include "common/tensor.h"
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
