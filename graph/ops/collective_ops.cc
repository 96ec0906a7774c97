// Collective ops, inserted by the master's strategy rewrites (master/strategy.h).
//
// CollectiveAllReduce(t_0, ..., t_k-1) -> (r_0, ..., r_k-1)
//   Every member of a group of `group_size` replicas (one per task) runs the
//   op with the same `group_key` and `instance_key` and the same shapes; each
//   r_i is the element-wise sum of t_i over the group, divided by group_size
//   when `mean` is true. The k inputs form one fused bucket: they travel and
//   are reduced together. float32 only. `group_tasks` lists the group's
//   tasks in rank order, comma-separated. The kernel lives with the worker's
//   collectives (worker/collective), which hold the group's membership.
//   Alternatively `group_devices` lists the devices of one task in rank order
//   (MIRRORED over NCCL: one rank per GPU of the task, reduced in process);
//   only GPU kernels take it. `wire_dtype` "float16" (default "float32";
//   CPU kernels only) sends and sums float16 copies of the inputs: half
//   the bytes (MixedPrecision.float16_all_reduce).
//
// CrossReplicaSum(t_0, ..., t_k-1) -> (r_0, ..., r_k-1)
//   r_i is the sum of t_i over the replicas: written by the model lowering
//   (synchronised batch norm, graph/ops/sync_norm_ops.cc) into the
//   one-replica graph, where it is the identity. The strategy rewrites
//   (master/strategies/cross_replica.cc) make each replica's copy an
//   all-reduce with mean false, or read sums taken on one device. Its
//   gradient is the CrossReplicaSum of its outputs' gradients: every
//   replica's loss depends on every replica's input. float32.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/gradients.h"
#include "graph/op_registry.h"

namespace weft {
namespace {

absl::Status AllReduceShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(int64_t group_size, GetIntAttr(c->node, "group_size"));
  if (group_size < 1) return c->Error(absl::StrCat("group_size ", group_size, " must be at least 1"));
  RETURN_IF_ERROR(GetIntAttr(c->node, "group_key").status());
  RETURN_IF_ERROR(GetIntAttr(c->node, "instance_key").status());
  RETURN_IF_ERROR(GetBoolAttrOr(c->node, "mean", false).status());
  ASSIGN_OR_RETURN(std::string wire, GetStringAttrOr(c->node, "wire_dtype", "float32"));
  if (wire != "float32" && wire != "float16") {
    return c->Error(absl::StrCat("wire_dtype must be float32 or float16, got '", wire.substr(0, 32), "'"));
  }
  ASSIGN_OR_RETURN(std::string devices, GetStringAttrOr(c->node, "group_devices", ""));
  if (!devices.empty()) {
    const int64_t n = static_cast<int64_t>(std::count(devices.begin(), devices.end(), ',')) + 1;
    if (n != group_size) {
      return c->Error(absl::StrCat("group_devices names ", n, " device(s) for group_size ", group_size));
    }
  }
  for (size_t i = 0; i < c->input_types.size(); ++i) {
    if (c->input_types[i] != DType::kFloat32) {
      return c->Error(absl::StrCat("input ", i, " is ", DTypeName(c->input_types[i]), "; all-reduce takes float32"));
    }
    c->output_types[i] = DType::kFloat32;
    c->output_shapes[i] = c->input_shapes[i];
  }
  return absl::OkStatus();
}

absl::Status CrossReplicaSumShape(InferenceContext* c) {
  for (size_t i = 0; i < c->input_types.size(); ++i) {
    if (c->input_types[i] != DType::kFloat32) {
      return c->Error(absl::StrCat("input ", i, " is ", DTypeName(c->input_types[i]), "; CrossReplicaSum takes float32"));
    }
    c->output_types[i] = DType::kFloat32;
    c->output_shapes[i] = c->input_shapes[i];
  }
  return absl::OkStatus();
}

// The gradients that reach the outputs meet in one CrossReplicaSum; an
// output no gradient reaches gives its input none.
absl::Status CrossReplicaSumGrad(GradContext* c) {
  std::vector<Output> grads;
  std::vector<int> of;
  for (size_t i = 0; i < c->grad_outputs.size(); ++i) {
    if (!c->grad_outputs[i].valid()) continue;
    grads.push_back(c->grad_outputs[i]);
    of.push_back(static_cast<int>(i));
  }
  Node* g = c->builder->AddNode("CrossReplicaSum", grads);
  if (g == nullptr) return c->builder->status();
  for (size_t k = 0; k < of.size(); ++k) c->grad_inputs[of[k]] = Output(g, static_cast<int>(k));
  return absl::OkStatus();
}

}  // namespace

WEFT_REGISTER_OP(OpDef{.name = "CrossReplicaSum",
                       .num_inputs = -1,
                       .num_outputs = -1,
                       .shape_fn = CrossReplicaSumShape,
                       .grad_fn = CrossReplicaSumGrad});
WEFT_REGISTER_OP(OpDef{.name = "CollectiveAllReduce",
                       .num_inputs = -1,
                       .num_outputs = -1,
                       .stateful = true,  // talks to peers: never merged or folded
                       .shape_fn = AllReduceShape});

}  // namespace weft
