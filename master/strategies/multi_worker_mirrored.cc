// MULTI_WORKER_MIRRORED: every replica (one per task) keeps its own copy of
// each variable, and the gradients meet in fused all-reduces across the
// tasks, through NCCL when every replica of the group is on a GPU and the
// master can make NCCL ids (master/strategy.h).
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "master/strategies/cross_replica.h"
#include "master/strategies/mirrored_common.h"
#include "master/strategies/strategies.h"

namespace weft {
namespace master {
namespace strategies {
namespace {

// Orders one replica's all-reduces of a group by control edges, in `order`
// (DataflowOrder, as replica 0's names).
void ChainBuckets(const std::vector<std::string>& order, std::vector<NodeDef*>* chain) {
  absl::flat_hash_map<std::string, size_t> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  auto at = [&](const NodeDef* nd) {
    const size_t slash = nd->name().find('/');
    auto it = position.find(ReplicaName(0, nd->name().substr(slash + 1)));
    return it == position.end() ? order.size() : it->second;
  };
  std::stable_sort(chain->begin(), chain->end(), [&](const NodeDef* a, const NodeDef* b) { return at(a) < at(b); });
  for (size_t i = 1; i < chain->size(); ++i) (*chain)[i]->add_input("^" + (*chain)[i - 1]->name());
}

// Gives each all-reduce group (group_key, group_tasks) of two or more
// ranks, all on GPUs, one NCCL unique id on all its nodes: the workers
// cache a communicator per (GPU, group_key, rank, size, id), so every
// bucket of the group shares one communicator. Ops on one communicator
// must be issued in the same order on every rank, and the dataflow alone
// does not fix the order of independent buckets, so each replica's
// all-reduces are chained, in an order that follows the dataflow (a
// synchronised batch norm's sums meet between the gradients' buckets).
void SetNcclIds(Rewrite* rw) {
  if (!rw->options.new_nccl_id) return;
  std::map<std::pair<int64_t, std::string>, std::vector<NodeDef*>> groups;
  for (NodeDef& nd : *rw->out_def.mutable_node()) {
    if (nd.op() != "CollectiveAllReduce") continue;
    const int64_t key = GetIntAttr(nd, "group_key").value_or(0);
    groups[{key, GetStringAttrOr(nd, "group_tasks", "").value_or("")}].push_back(&nd);
  }
  for (auto& [group, nodes] : groups) {
    const bool nccl = std::all_of(nodes.begin(), nodes.end(), [](const NodeDef* nd) {
      return OnGpu(nd->device()) && GetIntAttr(*nd, "group_size").value_or(1) > 1;
    });
    if (!nccl) continue;
    absl::StatusOr<std::string> id = rw->options.new_nccl_id();
    if (!id.ok()) {
      rw->nccl_id_status = absl::Status(id.status().code(),
                                        absl::StrCat("NCCL unique id for all-reduce group ", group.first, " (",
                                                     group.second, "): ", id.status().message()));
      continue;
    }
    std::vector<std::string> replica0;
    for (const NodeDef* nd : nodes) {
      if (absl::StartsWith(nd->name(), ReplicaName(0, ""))) replica0.push_back(nd->name());
    }
    const std::vector<std::string> order = DataflowOrder(*rw, replica0);
    std::map<std::string, std::vector<NodeDef*>> by_device;
    for (NodeDef* nd : nodes) {
      Rewrite::SetAttr(nd, Attr("nccl_unique_id", *id));
      by_device[nd->device()].push_back(nd);
    }
    for (auto& [device, chain] : by_device) ChainBuckets(order, &chain);
    ++rw->num_nccl_groups;
  }
}

}  // namespace

absl::Status RewriteMultiWorkerMirrored(Rewrite* rw) {
  const std::vector<std::vector<int>> buckets = FusionBuckets(*rw);
  rw->num_buckets = static_cast<int>(buckets.size());
  UpdateCopies copies = CopyMirroredReplicas(rw, Reduction::kAcrossTasks);
  AddAllReduceBuckets(rw, Reduction::kAcrossTasks, buckets, &copies);
  CrossReplicaAllReduces(rw, Reduction::kAcrossTasks);
  SetNcclIds(rw);
  FinishMirrored(rw);
  return absl::OkStatus();
}

}  // namespace strategies
}  // namespace master
}  // namespace weft
