#include "master/strategies/mirrored_common.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft {
namespace master {
namespace strategies {

std::vector<std::vector<int>> FusionBuckets(const Rewrite& rw) {
  std::vector<std::vector<int>> buckets;
  int64_t filled = 0;
  for (int i = 0; i < static_cast<int>(rw.updates.size()); ++i) {
    const int64_t bytes = rw.updates[i].bytes;
    // Compared as "bytes > room left" so that no sum can overflow.
    if (buckets.empty() || (filled > 0 && bytes > rw.options.fusion_bytes - filled)) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(i);
    filled += bytes;
  }
  return buckets;
}

UpdateCopies CopyMirroredReplicas(Rewrite* rw, Reduction how) {
  UpdateCopies copies;
  for (int r = 0; r < rw->n; ++r) {
    for (const NodeDef& nd : rw->in_def.node()) {
      if (nd.name() == rw->training.train_op) continue;
      NodeDef* c = rw->Copy(nd, r, ReplicaRename(r));
      if (nd.op() == "Variable") {
        if (how == Reduction::kAcrossTasks) {
          Rewrite::SetAttr(c, Attr("shared_name", nd.name()));  // one copy per task
        } else {
          Rewrite::SetAttr(c, Attr("init_name", nd.name()));  // copies in one task
        }
        if (r == 0) rw->variable_node[nd.name()] = c->name();
      }
      if (IsUpdate(nd)) copies[&nd].push_back(c);
    }
    // The replica's train op runs its updates.
    NodeDef* train = rw->Add(ReplicaName(r, "train"), "NoOp", rw->options.replica_devices[r], {});
    for (const Update& u : rw->updates) train->add_input("^" + ReplicaName(r, u.node->name()));
    rw->replica_train.push_back(train->name());
  }
  return copies;
}

void SetGroupAttrs(const Rewrite* rw, Reduction how, int64_t instance_key, bool mean, NodeDef* ar) {
  const std::vector<std::string>& devices = rw->options.replica_devices;
  Rewrite::SetAttr(ar, Attr("group_size", static_cast<int64_t>(rw->n)));
  Rewrite::SetAttr(ar, Attr("group_key", rw->options.group_key));
  Rewrite::SetAttr(ar, Attr("instance_key", instance_key));
  Rewrite::SetAttr(ar, Attr("mean", mean));
  if (how == Reduction::kAcrossTasks) {
    std::vector<std::string> tasks;
    for (const std::string& d : devices) tasks.push_back(TaskOf(d));
    Rewrite::SetAttr(ar, Attr("group_tasks", absl::StrJoin(tasks, ",")));
  } else {
    Rewrite::SetAttr(ar, Attr("group_devices", absl::StrJoin(devices, ",")));
  }
}

void AddAllReduceBuckets(Rewrite* rw, Reduction how, const std::vector<std::vector<int>>& buckets,
                         UpdateCopies* copies) {
  const std::vector<std::string>& devices = rw->options.replica_devices;
  for (int r = 0; r < rw->n; ++r) {
    for (size_t b = 0; b < buckets.size(); ++b) {
      NodeDef* ar =
          rw->Add(ReplicaName(r, absl::StrCat("allreduce/bucket_", b)), "CollectiveAllReduce", devices[r], {});
      int k = 0;
      for (int i : buckets[b]) {
        const Update& u = rw->updates[i];
        ar->add_input(RenameInputNode(u.grad, ReplicaRename(r)));
        NodeDef* c = (*copies)[u.node][r];
        c->set_input(u.grad_input, k == 0 ? ar->name() : absl::StrCat(ar->name(), ":", k));
        ++k;
      }
      SetGroupAttrs(rw, how, static_cast<int64_t>(b + 1), /*mean=*/true, ar);
      // Gradients only: synchronised batch norm's sums stay float32.
      if (how == Reduction::kAcrossTasks && rw->options.float16_all_reduce) {
        Rewrite::SetAttr(ar, Attr("wire_dtype", "float16"));
      }
    }
  }
}

void FinishMirrored(Rewrite* rw) {
  NodeDef* train = rw->Add("train", "NoOp", rw->options.replica_devices[0], {});
  for (const std::string& t : rw->replica_train) train->add_input("^" + t);
  rw->train_op = "train";
  rw->train_targets = rw->replica_train;
  rw->MeanLoss();
}

}  // namespace strategies
}  // namespace master
}  // namespace weft
