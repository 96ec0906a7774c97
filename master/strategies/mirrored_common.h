// The parts MIRRORED and MULTI_WORKER_MIRRORED share: every replica a full
// copy of the graph, its variables included, and the gradients meeting
// before each copy's updates, in fused all-reduce buckets or as a sum on the
// first device.
//
// Thread-safety: as Rewrite.
#ifndef WEFT_MASTER_STRATEGIES_MIRRORED_COMMON_H_
#define WEFT_MASTER_STRATEGIES_MIRRORED_COMMON_H_

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "master/strategies/rewrite.h"

namespace weft {
namespace master {
namespace strategies {

// How a mirrored strategy's replicas meet: an all-reduce across tasks
// (MULTI_WORKER_MIRRORED), an NCCL all-reduce across the GPUs of one task,
// or a sum on the first device.
enum class Reduction { kAcrossTasks, kLocalNccl, kFirstDevice };

// Each update of the one-replica graph -> its copy in each replica.
using UpdateCopies = absl::flat_hash_map<const NodeDef*, std::vector<NodeDef*>>;

// Indices into rw.updates, in graph order, grouped into buckets of about
// options.fusion_bytes (a bucket holds at least one update).
std::vector<std::vector<int>> FusionBuckets(const Rewrite& rw);

// Every replica's copy of the graph but the train op, with its own train
// op running its updates. Variables get shared_name (one copy per task,
// kAcrossTasks) or init_name (copies in one task).
UpdateCopies CopyMirroredReplicas(Rewrite* rw, Reduction how);

// Per replica and bucket, one CollectiveAllReduce (mean) of the bucket's
// gradients that the replica's update copies read. REQUIRES: how is
// kAcrossTasks or kLocalNccl.
void AddAllReduceBuckets(Rewrite* rw, Reduction how, const std::vector<std::vector<int>>& buckets,
                         UpdateCopies* copies);

// Sets the group of `how` on the all-reduce `ar`: group_size, group_key,
// instance_key, mean, and group_tasks (kAcrossTasks) or group_devices.
void SetGroupAttrs(const Rewrite* rw, Reduction how, int64_t instance_key, bool mean, NodeDef* ar);

// The one-step "train" over every replica's train op, and the mean loss.
void FinishMirrored(Rewrite* rw);

}  // namespace strategies
}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_STRATEGIES_MIRRORED_COMMON_H_
