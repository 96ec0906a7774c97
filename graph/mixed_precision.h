// Mixed precision in a model job's graph (MixedPrecision in
// proto/job.proto; docs/architecture.md, "Mixed precision"):
//
// - compute: every MatMul the lowering and autodiff add carries
//   compute_type (graph/ops/compute_type.h), so its operands are rounded to
//   float16 or bfloat16 and the product accumulates in float32 on the
//   tensor cores. Variables, activations and updates stay float32.
// - dynamic loss scaling: a float32 scalar variable `loss_scale` multiplies
//   the loss before autodiff (TrainingPass); UnscaleGradients divides the
//   gradients by it and marks a step that overflowed; the updates carry
//   skip_nonfinite, so such a step changes no weight and no slot; and
//   ApplyLossScale (graph/ops/loss_scale_ops.cc), with its counter variable
//   `loss_scale/good_steps`, halves or grows the scale. Both variables are
//   checkpointed with the model's.
//
// Thread-safety: as GraphBuilder.
#ifndef WEFT_GRAPH_MIXED_PRECISION_H_
#define WEFT_GRAPH_MIXED_PRECISION_H_

#include <vector>

#include "absl/status/statusor.h"
#include "graph/builder.h"
#include "graph/ops/compute_type.h"
#include "proto/job.pb.h"

namespace weft {

// A job's MixedPrecision with its defaults filled in.
struct MixedPrecisionPlan {
  ComputeType compute = ComputeType::kFloat32;
  bool loss_scaling = false;
  float initial_scale = 32768.0f;
  int64_t growth_interval = 2000;
};

// INVALID_ARGUMENT, naming the field, for a compute type it does not know,
// a non-finite initial scale or one below 1, a negative growth interval,
// or loss scaling under replicas_to_aggregate (whose accumulators do not
// skip a step).
absl::StatusOr<MixedPrecisionPlan> PlanMixedPrecision(const JobSpec& job);

// From now on every MatMul `b` adds computes in plan.compute.
void UseComputeType(GraphBuilder* b, const MixedPrecisionPlan& plan);

// The variable "loss_scale" (plan.initial_scale at first), or an invalid
// Output without loss scaling.
Output LossScaleVariable(GraphBuilder* b, const MixedPrecisionPlan& plan);

// The scaled gradients divided by `scale` (UnscaleGradients, in order) and
// the step's `overflow` (NaN or 0).
struct Unscaled {
  std::vector<Output> grads;
  Output overflow;
};
absl::StatusOr<Unscaled> UnscaleGradients(GraphBuilder* b, Output scale, const std::vector<Output>& grads);

// ApplyLossScale on `scale` and a new counter variable, by `overflow`.
absl::StatusOr<Node*> AddLossScaleUpdate(GraphBuilder* b, const MixedPrecisionPlan& plan, Output scale,
                                         Output overflow);

}  // namespace weft

#endif  // WEFT_GRAPH_MIXED_PRECISION_H_
