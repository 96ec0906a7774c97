// Tensor fusion: all-reduce many (typically small) gradient tensors as a few
// large buckets, so per-collective costs (rounds, headers, wake-ups) are paid
// per bucket rather than per tensor.
//
// Buckets are planned from the list alone, in its order: consecutive tensors
// of one dtype share a bucket until the next would take it past
// `bucket_bytes`. Every worker passing the same list (same order, dtypes and
// sizes) therefore forms the same buckets. A tensor of `bucket_bytes` or more
// gets a bucket of its own and is all-reduced in place; other buckets are
// packed into a scratch tensor, all-reduced, and unpacked.
//
// Bucket b runs as the collective (group, params.instance_key + b, step): a
// fused all-reduce uses the instance keys [instance_key, instance_key +
// number of buckets).
//
// Thread-safety: PlanFusionBuckets is a pure function; FusedAllReduceAsync is
// as thread-safe as the executor.
#ifndef WEFT_WORKER_COLLECTIVE_FUSION_H_
#define WEFT_WORKER_COLLECTIVE_FUSION_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "worker/collective/collective_executor.h"

namespace weft {
namespace collective {

inline constexpr size_t kDefaultBucketBytes = 4 << 20;

struct FusionBucket {
  DType dtype = DType::kInvalid;
  std::vector<int> tensors;  // indices into the planned list, in order
  size_t bytes = 0;
};

std::vector<FusionBucket> PlanFusionBuckets(absl::Span<Tensor* const> tensors, size_t bucket_bytes);

// All-reduces every tensor of `tensors` in place, bucket by bucket, all
// buckets at once; `done` runs once, with the first bucket's error if any.
// REQUIRES: the tensors stay alive, and untouched, until `done`.
void FusedAllReduceAsync(CollectiveExecutor* executor, const CollectiveParams& params, std::vector<Tensor*> tensors,
                         size_t bucket_bytes, StatusCallback done);
absl::Status FusedAllReduce(CollectiveExecutor* executor, const CollectiveParams& params,
                            std::vector<Tensor*> tensors, size_t bucket_bytes = kDefaultBucketBytes);

}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_FUSION_H_
