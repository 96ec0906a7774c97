// Helpers of the CPU kernels: Eigen views of tensor payloads, and a
// ParallelFor that stays on the caller for small work or a pool without
// threads. Attribute parsing and shape checks that the CUDA kernels share
// live in runtime/kernels/kernel_checks.h.
#ifndef WEFT_RUNTIME_KERNELS_CPU_KERNEL_UTIL_H_
#define WEFT_RUNTIME_KERNELS_CPU_KERNEL_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <utility>

#include "Eigen/Core"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/tensor.h"
#include "common/thread_pool.h"
#include "runtime/kernels/kernel_checks.h"
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

// A zeroed scratch of `n` floats (ZeroedFloats) or doubles (ZeroedDoubles,
// two float32 each: n fits, since a float tensor of the data it sums
// exists), held by `holder`; nullptr, with the error recorded, when the
// allocator refuses.
inline float* ZeroedScratch(OpKernelContext* ctx, int64_t floats, Tensor* holder) {
  absl::StatusOr<Tensor> t = ctx->allocate_temp(DType::kFloat32, TensorShape{std::max<int64_t>(floats, 1)});
  if (!t.ok()) {
    ctx->SetStatus(t.status());
    return nullptr;
  }
  *holder = *std::move(t);
  std::fill(holder->data<float>(), holder->data<float>() + floats, 0.0f);
  return holder->data<float>();
}
inline float* ZeroedFloats(OpKernelContext* ctx, int64_t n, Tensor* holder) {
  return ZeroedScratch(ctx, n, holder);
}
inline double* ZeroedDoubles(OpKernelContext* ctx, int64_t n, Tensor* holder) {
  float* p = ZeroedScratch(ctx, 2 * n, holder);
  return p == nullptr ? nullptr : reinterpret_cast<double*>(p);
}

// The device-neutral checks (kernel_checks.h), under the names the CPU
// kernels have always used.
using kernels::ConcatRowsOutputShape;
using kernels::ExpectDType;
using kernels::ExpectRank;
using kernels::ExpectSameShape;
using kernels::GetAttr;
using kernels::GetSliceRowsAttrs;
using kernels::SliceRowsOffset;

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
