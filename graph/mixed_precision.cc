#include "graph/mixed_precision.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"

namespace weft {

absl::StatusOr<MixedPrecisionPlan> PlanMixedPrecision(const JobSpec& job) {
  const MixedPrecision& mp = job.mixed_precision();
  MixedPrecisionPlan plan;
  switch (mp.compute()) {
    case MixedPrecision::FLOAT32: plan.compute = ComputeType::kFloat32; break;
    case MixedPrecision::FLOAT16: plan.compute = ComputeType::kFloat16; break;
    case MixedPrecision::BFLOAT16: plan.compute = ComputeType::kBFloat16; break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("mixed_precision.compute ", static_cast<int>(mp.compute()), " is unknown"));
  }
  switch (mp.loss_scaling()) {
    case MixedPrecision::LOSS_SCALING_DEFAULT: plan.loss_scaling = plan.compute == ComputeType::kFloat16; break;
    case MixedPrecision::DYNAMIC: plan.loss_scaling = true; break;
    case MixedPrecision::NONE: plan.loss_scaling = false; break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("mixed_precision.loss_scaling ", static_cast<int>(mp.loss_scaling()), " is unknown"));
  }
  if (mp.initial_loss_scale() != 0.0f) {
    if (!(mp.initial_loss_scale() >= 1.0f) || !std::isfinite(mp.initial_loss_scale())) {
      return absl::InvalidArgumentError(absl::StrCat("mixed_precision.initial_loss_scale must be a finite number of "
                                                     "at least 1 (or 0 for 32768), got ",
                                                     mp.initial_loss_scale()));
    }
    plan.initial_scale = mp.initial_loss_scale();
  }
  if (mp.growth_interval() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mixed_precision.growth_interval must be positive (or 0 for 2000), got ", mp.growth_interval()));
  }
  if (mp.growth_interval() > 0) plan.growth_interval = mp.growth_interval();
  if (mp.float16_all_reduce() && job.strategy().kind() != StrategySpec::MULTI_WORKER_MIRRORED) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mixed_precision.float16_all_reduce is for MULTI_WORKER_MIRRORED, whose all-reduce it halves; this job's "
        "strategy is ",
        StrategySpec::Kind_Name(job.strategy().kind())));
  }
  if (plan.loss_scaling && job.strategy().replicas_to_aggregate() > 0) {
    return absl::InvalidArgumentError(
        "mixed_precision loss scaling cannot be combined with strategy.replicas_to_aggregate: the parameter "
        "servers' accumulators would apply a step that overflowed; use bfloat16 without loss scaling, or "
        "asynchronous parameter servers");
  }
  return plan;
}

void UseComputeType(GraphBuilder* b, const MixedPrecisionPlan& plan) {
  if (plan.compute == ComputeType::kFloat32) return;
  b->SetOpDefaults("MatMul", {Attr("compute_type", ComputeTypeName(plan.compute))});
}

Output LossScaleVariable(GraphBuilder* b, const MixedPrecisionPlan& plan) {
  if (!plan.loss_scaling) return Output();
  return b->Variable("loss_scale", DType::kFloat32, TensorShape{}, "constant", 0, plan.initial_scale);
}

absl::StatusOr<Unscaled> UnscaleGradients(GraphBuilder* b, Output scale, const std::vector<Output>& grads) {
  std::vector<Output> in = {scale};
  in.insert(in.end(), grads.begin(), grads.end());
  Node* n = b->AddNode("UnscaleGradients", in, {}, "loss_scale/unscale");
  RETURN_IF_ERROR(b->status());
  Unscaled u;
  for (size_t i = 0; i < grads.size(); ++i) u.grads.push_back(Output(n, static_cast<int>(i)));
  u.overflow = Output(n, static_cast<int>(grads.size()));
  return u;
}

absl::StatusOr<Node*> AddLossScaleUpdate(GraphBuilder* b, const MixedPrecisionPlan& plan, Output scale,
                                         Output overflow) {
  Output good = b->Variable("loss_scale/good_steps", DType::kFloat32, TensorShape{}, "zeros");
  std::vector<Node*> readers;
  for (const Node::OutEdge& e : scale.node->out_edges()) readers.push_back(e.dst);
  Node* n = b->AddNode("ApplyLossScale", {scale, good, overflow}, {Attr("growth_interval", plan.growth_interval)},
                       "loss_scale/update", readers);
  RETURN_IF_ERROR(b->status());
  return n;
}

}  // namespace weft
