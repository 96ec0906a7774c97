// Optimizer update ops. Each updates its variable inputs (outputs of Variable
// nodes, whose buffers are the variables' own) in place and forwards the
// updated `var` as output 0, so a train step fetches or targets them. The
// gradient is always the last input, and every input before it is a
// variable (the strategies rely on both).
//
// ApplyGradientDescent(var, [t,] grad)         var -= lr(t) * (grad + weight_decay var)
// ApplyMomentum(var, accum, [t,] grad)         g = grad + weight_decay var
//                                              accum = accum * momentum + g
//                                              var -= lr(t) * accum, or with
//                                              use_nesterov
//                                              var -= lr(t) * (g + momentum * accum)
// ApplyAdam(var, m, v, t, grad)                t += 1
//                                              var -= lr(t) * weight_decay * var (AdamW's
//                                              decoupled decay; 0 by default)
//                                              m = beta1 m + (1 - beta1) grad
//                                              v = beta2 v + (1 - beta2) grad^2
//                                              var -= lr_t m / (sqrt(v) + epsilon),
//                                              lr_t = lr(t) sqrt(1 - beta2^t) / (1 - beta1^t)
// ApplyMovingAverage(var, value)               var = momentum var + (1 - momentum) value,
//                                              momentum in [0, 1): a moving statistic
//                                              (BatchNorm's). `value` stands where the
//                                              other updates have their gradient, so the
//                                              strategies average it over the replicas
//                                              as they average gradients.
//
// t is the variable's update count, a float32 scalar variable the update
// increments before using it; lr(t) is the schedule of the attributes
// learning_rate, warmup_steps, decay ("", "cosine" or "step"), decay_steps,
// decay_alpha and decay_factor (graph/ops/lr_schedule.h). Without t (the
// optional input of the first two) the rate is learning_rate, and a
// schedule that varies is refused.
//
// With the bool attribute skip_nonfinite (loss scaling, loss_scale_ops.cc)
// the first three skip their update entirely, t included, when element 0
// of grad is not finite: UnscaleGradients marks a step that overflowed
// there.
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "graph/ops/shape_util.h"
#include "graph/ops/training_attrs.h"

namespace weft {
namespace {

using shape_util::ExpectFloat;
using shape_util::ExpectRank;

absl::Status ExpectAttrs(InferenceContext* c, std::initializer_list<const char*> names) {
  for (const char* name : names) RETURN_IF_ERROR(GetFloatAttr(c->node, name).status());
  return absl::OkStatus();
}

// Each of `inputs` (named by `roles`) must be float32 with var's shape.
absl::Status ExpectLikeVar(InferenceContext* c, const std::vector<int>& inputs,
                           const std::vector<const char*>& roles) {
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

absl::Status ExpectWeightDecay(InferenceContext* c) {
  ASSIGN_OR_RETURN(float wd, GetFloatAttrOr(c->node, "weight_decay", 0.0f));
  if (!(wd >= 0.0f) || !std::isfinite(wd)) {
    return c->Error(absl::StrCat("weight_decay must be a non-negative number, got ", wd));
  }
  return absl::OkStatus();
}

// The update count t, a float32 scalar, at input `i`.
absl::Status ExpectCount(InferenceContext* c, int i) {
  RETURN_IF_ERROR(ExpectFloat(c, i, "t"));
  return ExpectRank(c, i, 0, "t (the update count)");
}

// An update with `slots` slot variables before an optional t and the
// gradient: checks the count of inputs, the schedule against t, and the
// operands against var.
absl::Status ScheduledShape(InferenceContext* c, int slots, std::initializer_list<int> like_var,
                            std::initializer_list<const char*> roles) {
  const int n = static_cast<int>(c->input_types.size());
  if (n != slots + 2 && n != slots + 3) {
    return c->Error(absl::StrCat("takes ", slots + 2, " inputs, or ", slots + 3, " with the update count t; got ", n));
  }
  ASSIGN_OR_RETURN(LrSchedule schedule, ParseLrSchedule(c->node));
  const bool has_t = n == slots + 3;
  if (has_t) RETURN_IF_ERROR(ExpectCount(c, slots + 1));
  if (!has_t && schedule.varies()) {
    return c->Error("a learning-rate schedule (warmup_steps or decay) needs the update count t as the input "
                    "before grad");
  }
  RETURN_IF_ERROR(ExpectWeightDecay(c));
  RETURN_IF_ERROR(GetBoolAttrOr(c->node, "skip_nonfinite", false).status());
  std::vector<int> inputs(like_var);
  inputs.push_back(n - 1);
  std::vector<const char*> names(roles);
  names.push_back("grad");
  return ExpectLikeVar(c, inputs, names);
}

absl::Status GradientDescentShape(InferenceContext* c) { return ScheduledShape(c, 0, {}, {}); }

absl::Status MomentumShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectAttrs(c, {"momentum"}));
  RETURN_IF_ERROR(GetBoolAttrOr(c->node, "use_nesterov", false).status());
  return ScheduledShape(c, 1, {1}, {"accum"});
}

absl::Status AdamShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectAttrs(c, {"beta1", "beta2", "epsilon"}));
  RETURN_IF_ERROR(ParseLrSchedule(c->node).status());
  RETURN_IF_ERROR(ExpectWeightDecay(c));
  RETURN_IF_ERROR(ExpectCount(c, 3));
  RETURN_IF_ERROR(GetBoolAttrOr(c->node, "skip_nonfinite", false).status());
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

absl::StatusOr<LrSchedule> ParseLrSchedule(const NodeDef& node) {
  LrSchedule s;
  ASSIGN_OR_RETURN(s.learning_rate, GetFloatAttr(node, "learning_rate"));
  if (!std::isfinite(s.learning_rate)) return absl::InvalidArgumentError("attr learning_rate must be finite");
  ASSIGN_OR_RETURN(s.warmup_steps, GetIntAttrOr(node, "warmup_steps", 0));
  if (s.warmup_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("attr warmup_steps must not be negative, got ", s.warmup_steps));
  }
  ASSIGN_OR_RETURN(std::string decay, GetStringAttrOr(node, "decay", ""));
  if (decay == "cosine") {
    s.decay = LrSchedule::kCosine;
  } else if (decay == "step") {
    s.decay = LrSchedule::kStep;
  } else if (!decay.empty() && decay != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("attr decay must be \"cosine\", \"step\" or empty, got \"", decay.substr(0, 32), "\""));
  }
  if (s.decay == LrSchedule::kNone) return s;
  ASSIGN_OR_RETURN(s.decay_steps, GetIntAttr(node, "decay_steps"));
  if (s.decay_steps <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attr decay_steps must be positive with decay \"", decay, "\", got ", s.decay_steps));
  }
  ASSIGN_OR_RETURN(s.alpha, GetFloatAttrOr(node, "decay_alpha", 0.0f));
  if (!(s.alpha >= 0.0f && s.alpha <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("attr decay_alpha must be in [0, 1], got ", s.alpha));
  }
  ASSIGN_OR_RETURN(s.factor, GetFloatAttrOr(node, "decay_factor", 0.1f));
  if (!(s.factor > 0.0f && s.factor <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("attr decay_factor must be in (0, 1], got ", s.factor));
  }
  return s;
}

WEFT_REGISTER_OP(OpDef{.name = "ApplyMovingAverage",
                       .num_inputs = 2,
                       .num_outputs = 1,
                       .stateful = true,
                       .shape_fn = MovingAverageShape});
WEFT_REGISTER_OP(OpDef{.name = "ApplyGradientDescent",
                       .num_inputs = -1,
                       .num_outputs = 1,
                       .stateful = true,
                       .shape_fn = GradientDescentShape});
WEFT_REGISTER_OP(
    OpDef{.name = "ApplyMomentum", .num_inputs = -1, .num_outputs = 1, .stateful = true, .shape_fn = MomentumShape});
WEFT_REGISTER_OP(
    OpDef{.name = "ApplyAdam", .num_inputs = 5, .num_outputs = 1, .stateful = true, .shape_fn = AdamShape});

}  // namespace weft
