// Ops of synchronous replicas that aggregate the first k of N gradients on
// the parameter server (StrategySpec.replicas_to_aggregate; the accumulator
// itself is runtime/kernels/accumulator.h). Attrs of every op here: accumulator (string,
// the accumulator's name in the device's resources, one per variable) and
// num_required (int, k >= 1).
//
// AccumulatorStep() -> step                 int64 scalar: the global step the
//                                           accumulator accepts now; a replica
//                                           reads it before the variable.
// AccumulateApplyGradientDescent(var, grad, local_step)
// AccumulateApplyMomentum(var, accum, grad, local_step)
// AccumulateApplyAdam(var, m, v, t, grad, local_step)
//     -> (var, outcome)                     pushes `grad` computed at
//                                           local_step. outcome (int64 scalar):
//                                           -1 refused as stale (not applied),
//                                           0 added and applied by another
//                                           push, 1 added as the k-th: this
//                                           push applied the mean of the k
//                                           with the named Apply op's rule and
//                                           attrs. An added push finishes only
//                                           once its step is applied, or fails
//                                           when its step is aborted.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "graph/ops/shape_util.h"

namespace weft {
namespace {

using shape_util::ExpectRank;
using shape_util::ExpectType;

absl::Status ExpectAccumulatorAttrs(InferenceContext* c) {
  ASSIGN_OR_RETURN(std::string name, GetStringAttr(c->node, "accumulator"));
  if (name.empty()) return c->Error("attr accumulator must name the accumulator");
  ASSIGN_OR_RETURN(int64_t k, GetIntAttr(c->node, "num_required"));
  if (k < 1) return c->Error(absl::StrCat("attr num_required must be at least 1, got ", k));
  return absl::OkStatus();
}

absl::Status StepShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectAccumulatorAttrs(c));
  c->output_types[0] = DType::kInt64;
  c->output_shapes[0].Clear();  // a scalar
  return absl::OkStatus();
}

// The Apply op's own checks of var, slots and grad, then the local step.
ShapeFn PushShape(const char* apply_op) {
  return [apply_op](InferenceContext* c) -> absl::Status {
    RETURN_IF_ERROR(ExpectAccumulatorAttrs(c));
    const int step = static_cast<int>(c->input_types.size()) - 1;
    RETURN_IF_ERROR(ExpectType(c, step, DType::kInt64, "local_step"));
    RETURN_IF_ERROR(ExpectRank(c, step, 0, "local_step"));
    ASSIGN_OR_RETURN(const OpDef* apply, OpRegistry::Global()->Lookup(apply_op));
    // The Apply op sees its own inputs, without local_step.
    InferenceContext inner{c->node,
                           {c->input_types.begin(), c->input_types.end() - 1},
                           {c->input_shapes.begin(), c->input_shapes.end() - 1},
                           {DType::kInvalid},
                           {TensorShape()}};
    RETURN_IF_ERROR(apply->shape_fn(&inner));
    c->output_types[0] = inner.output_types[0];
    c->output_shapes[0] = inner.output_shapes[0];
    c->output_types[1] = DType::kInt64;
    c->output_shapes[1].Clear();  // a scalar
    return absl::OkStatus();
  };
}

}  // namespace

WEFT_REGISTER_OP(
    OpDef{.name = "AccumulatorStep", .num_inputs = 0, .num_outputs = 1, .stateful = true, .shape_fn = StepShape});
WEFT_REGISTER_OP(OpDef{.name = "AccumulateApplyGradientDescent",
                       .num_inputs = 3,
                       .num_outputs = 2,
                       .stateful = true,
                       .shape_fn = PushShape("ApplyGradientDescent")});
WEFT_REGISTER_OP(OpDef{.name = "AccumulateApplyMomentum",
                       .num_inputs = 4,
                       .num_outputs = 2,
                       .stateful = true,
                       .shape_fn = PushShape("ApplyMomentum")});
WEFT_REGISTER_OP(OpDef{.name = "AccumulateApplyAdam",
                       .num_inputs = 6,
                       .num_outputs = 2,
                       .stateful = true,
                       .shape_fn = PushShape("ApplyAdam")});

}  // namespace weft
