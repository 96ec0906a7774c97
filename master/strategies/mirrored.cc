// MIRRORED: copies of each variable on each local device of one task
// (master/strategy.h). With a GPU per replica the gradients meet in fused
// in-process NCCL all-reduces; otherwise their mean is summed on the first
// device and every copy applies it.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "master/strategies/cross_replica.h"
#include "master/strategies/mirrored_common.h"
#include "master/strategies/strategies.h"

namespace weft {
namespace master {
namespace strategies {
namespace {

// In-process all-reduce without collectives: the mean on the first device,
// read by every replica's update copy.
void MeanOnFirstDevice(Rewrite* rw, UpdateCopies* copies) {
  for (const Update& u : rw->updates) {
    std::vector<std::string> terms;
    for (int r = 0; r < rw->n; ++r) terms.push_back(RenameInputNode(u.grad, ReplicaRename(r)));
    const std::string mean =
        rw->Mean(absl::StrCat("allreduce/", u.node->name()), rw->options.replica_devices[0], terms);
    for (int r = 0; r < rw->n; ++r) (*copies)[u.node][r]->set_input(u.grad_input, mean);
  }
}

}  // namespace

bool LocalNccl(const StrategyOptions& options) {
  const std::vector<std::string>& devices = options.replica_devices;
  if (options.cross_device_ops == StrategySpec::REDUCE_TO_FIRST_DEVICE || devices.size() < 2) return false;
  std::set<std::string> distinct(devices.begin(), devices.end());
  return distinct.size() == devices.size() && std::all_of(devices.begin(), devices.end(), OnGpu);
}

absl::Status RewriteMirrored(Rewrite* rw) {
  const Reduction how = LocalNccl(rw->options) ? Reduction::kLocalNccl : Reduction::kFirstDevice;
  std::vector<std::vector<int>> buckets;
  if (how == Reduction::kLocalNccl) {
    buckets = FusionBuckets(*rw);
    rw->num_buckets = static_cast<int>(buckets.size());
  }
  UpdateCopies copies = CopyMirroredReplicas(rw, how);
  if (how == Reduction::kLocalNccl) {
    // The in-process group is issued as one NCCL group call per bucket
    // (runtime/local_gather.h), so it needs neither an id nor an order.
    AddAllReduceBuckets(rw, how, buckets, &copies);
    CrossReplicaAllReduces(rw, how);
  } else {
    MeanOnFirstDevice(rw, &copies);
  }
  FinishMirrored(rw);
  return absl::OkStatus();
}

}  // namespace strategies
}  // namespace master
}  // namespace weft
