// Optimizer update ops. Each updates its variable inputs (outputs of Variable
// nodes, whose buffers are the variables' own) in place and forwards the
// updated `var` as output 0, so a train step fetches or targets them.
//
// ApplyGradientDescent(var, grad)             var -= lr * grad
// ApplyMomentum(var, accum, grad)              accum = accum * momentum + grad
//                                              var -= lr * accum, or with
//                                              use_nesterov
//                                              var -= lr * (grad + momentum * accum)
// ApplyAdam(var, m, v, t, grad)                t += 1 (t: float32 scalar variable)
//                                              m = beta1 m + (1 - beta1) grad
//                                              v = beta2 v + (1 - beta2) grad^2
//                                              var -= lr_t m / (sqrt(v) + epsilon),
//                                              lr_t = lr sqrt(1 - beta2^t) / (1 - beta1^t)
// ApplyMovingAverage(var, value)               var = momentum var + (1 - momentum) value,
//                                              momentum in [0, 1): a moving statistic
//                                              (BatchNorm's). `value` stands where the
//                                              other updates have their gradient, so the
//                                              strategies average it over the replicas
//                                              as they average gradients.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "graph/ops/shape_util.h"

namespace weft {
namespace {

using shape_util::ExpectFloat;
using shape_util::ExpectRank;

absl::Status ExpectAttrs(InferenceContext* c, std::initializer_list<const char*> names) {
  for (const char* name : names) RETURN_IF_ERROR(GetFloatAttr(c->node, name).status());
  return absl::OkStatus();
}

// Each of `inputs` (named by `roles`) must be float32 with var's shape.
absl::Status ExpectLikeVar(InferenceContext* c, std::initializer_list<int> inputs,
                           std::initializer_list<const char*> roles) {
  RETURN_IF_ERROR(ExpectFloat(c, 0, "var"));
  auto role = roles.begin();
  for (int i : inputs) {
    RETURN_IF_ERROR(ExpectFloat(c, i, *role));
    if (!MergeShapes(c->input_shapes[0], c->input_shapes[i]).ok()) {
      return c->Error(absl::StrCat(*role, " ", c->input_shapes[i].DebugString(), " must have var's shape ",
                                   c->input_shapes[0].DebugString()));
    }
    ++role;
  }
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = c->input_shapes[0];
  return absl::OkStatus();
}

absl::Status GradientDescentShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectAttrs(c, {"learning_rate"}));
  return ExpectLikeVar(c, {1}, {"grad"});
}

absl::Status MomentumShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectAttrs(c, {"learning_rate", "momentum"}));
  RETURN_IF_ERROR(GetBoolAttrOr(c->node, "use_nesterov", false).status());
  return ExpectLikeVar(c, {1, 2}, {"accum", "grad"});
}

absl::Status AdamShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectAttrs(c, {"learning_rate", "beta1", "beta2", "epsilon"}));
  RETURN_IF_ERROR(ExpectFloat(c, 3, "t"));
  RETURN_IF_ERROR(ExpectRank(c, 3, 0, "t (the update count)"));
  return ExpectLikeVar(c, {1, 2, 4}, {"m", "v", "grad"});
}

absl::Status MovingAverageShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(float momentum, GetFloatAttr(c->node, "momentum"));
  if (!(momentum >= 0.0f && momentum < 1.0f)) {
    return c->Error(absl::StrCat("momentum must be in [0, 1), got ", momentum));
  }
  return ExpectLikeVar(c, {1}, {"value"});
}

}  // namespace

WEFT_REGISTER_OP(OpDef{.name = "ApplyMovingAverage",
                       .num_inputs = 2,
                       .num_outputs = 1,
                       .stateful = true,
                       .shape_fn = MovingAverageShape});
WEFT_REGISTER_OP(OpDef{.name = "ApplyGradientDescent",
                       .num_inputs = 2,
                       .num_outputs = 1,
                       .stateful = true,
                       .shape_fn = GradientDescentShape});
WEFT_REGISTER_OP(
    OpDef{.name = "ApplyMomentum", .num_inputs = 3, .num_outputs = 1, .stateful = true, .shape_fn = MomentumShape});
WEFT_REGISTER_OP(
    OpDef{.name = "ApplyAdam", .num_inputs = 5, .num_outputs = 1, .stateful = true, .shape_fn = AdamShape});

}  // namespace weft
