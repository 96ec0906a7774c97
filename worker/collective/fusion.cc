#include "worker/collective/fusion.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "worker/collective/reduce.h"

namespace weft {
namespace collective {

std::vector<FusionBucket> PlanFusionBuckets(absl::Span<Tensor* const> tensors, size_t bucket_bytes) {
  std::vector<FusionBucket> buckets;
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
    const Tensor& t = *tensors[i];
    const size_t bytes = t.TotalBytes();
    FusionBucket* last = buckets.empty() ? nullptr : &buckets.back();
    const bool fits = last != nullptr && last->dtype == t.dtype() && last->bytes < bucket_bytes &&
                      last->bytes + bytes <= bucket_bytes && bytes < bucket_bytes;
    if (!fits) {
      buckets.emplace_back();
      last = &buckets.back();
      last->dtype = t.dtype();
    }
    last->tensors.push_back(i);
    last->bytes += bytes;
  }
  return buckets;
}

namespace {

// Counts the buckets down and keeps the first error.
struct FusedState {
  explicit FusedState(int pending, StatusCallback done) : pending(pending), done(std::move(done)) {}
  void BucketDone(const absl::Status& s) {
    {
      absl::MutexLock lock(&mu);
      if (!s.ok() && status.ok()) status = s;
      if (--pending > 0) return;
    }
    done(status);
  }
  absl::Mutex mu;
  int pending ABSL_GUARDED_BY(mu);
  absl::Status status ABSL_GUARDED_BY(mu);
  StatusCallback done;
};

}  // namespace

void FusedAllReduceAsync(CollectiveExecutor* executor, const CollectiveParams& params, std::vector<Tensor*> tensors,
                         size_t bucket_bytes, StatusCallback done) {
  for (Tensor* t : tensors) {
    if (t == nullptr || !t->IsInitialized()) {
      return done(absl::InvalidArgumentError("fused all-reduce: a tensor is uninitialised"));
    }
    if (absl::Status s = CheckReducibleDType(t->dtype()); !s.ok()) return done(s);
  }
  std::vector<FusionBucket> buckets = PlanFusionBuckets(tensors, bucket_bytes);
  if (buckets.empty()) return done(absl::OkStatus());
  auto state = std::make_shared<FusedState>(static_cast<int>(buckets.size()), std::move(done));
  for (size_t b = 0; b < buckets.size(); ++b) {
    CollectiveParams bucket_params = params;
    bucket_params.instance_key = params.instance_key + static_cast<int64_t>(b);
    const FusionBucket& bucket = buckets[b];
    if (bucket.tensors.size() == 1) {  // nothing to pack
      executor->AllReduceAsync(bucket_params, tensors[bucket.tensors[0]],
                               [state](const absl::Status& s) { state->BucketDone(s); });
      continue;
    }
    const size_t element_bytes = DTypeSize(bucket.dtype);
    auto packed = std::make_shared<Tensor>(bucket.dtype, TensorShape{static_cast<int64_t>(bucket.bytes / element_bytes)});
    std::vector<Tensor*> members;
    char* out = static_cast<char*>(packed->raw_data());
    for (int i : bucket.tensors) {
      members.push_back(tensors[i]);
      std::memcpy(out, tensors[i]->raw_data(), tensors[i]->TotalBytes());
      out += tensors[i]->TotalBytes();
    }
    executor->AllReduceAsync(bucket_params, packed.get(),
                             [state, packed, members = std::move(members)](const absl::Status& s) {
                               if (s.ok()) {
                                 const char* in = static_cast<const char*>(packed->raw_data());
                                 for (Tensor* t : members) {
                                   std::memcpy(t->raw_data(), in, t->TotalBytes());
                                   in += t->TotalBytes();
                                 }
                               }
                               state->BucketDone(s);
                             });
  }
}

absl::Status FusedAllReduce(CollectiveExecutor* executor, const CollectiveParams& params,
                            std::vector<Tensor*> tensors, size_t bucket_bytes) {
  absl::Notification finished;
  absl::Status status;
  FusedAllReduceAsync(executor, params, std::move(tensors), bucket_bytes, [&](const absl::Status& s) {
    status = s;
    finished.Notify();
  });
  finished.WaitForNotification();
  return status;
}

}  // namespace collective
}  // namespace weft
