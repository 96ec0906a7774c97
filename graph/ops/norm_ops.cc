// Normalisation and global pooling ops. The channel is x's last axis (NHWC
// images, [batch, features] matrices); statistics are taken over every
// other axis, M = x.num_elements / C values per channel.
//
// BatchNorm(x, gamma[C], beta[C]) -> (y, mean[C], variance[C], inv_std[C])
//     training mode: mean and biased variance v of the batch,
//     inv_std = 1 / sqrt(v + epsilon), y = (x - mean) inv_std gamma + beta.
//     `variance` is the unbiased v M / (M - 1) (v when M == 1), the figure
//     a moving average of the population variance wants (as PyTorch keeps).
//     Attr epsilon (default 1e-3). Gradients flow from y only.
// BatchNormGrad(dy, x, gamma, mean, inv_std) -> (dx, dgamma, dbeta)
// BatchNormInference(x, gamma, beta, mean, variance) -> y
//     y = (x - mean) / sqrt(variance + epsilon) gamma + beta; no gradient
//     (evaluation only).
// GlobalAvgPool(x[N,H,W,C]) -> [N,C]: the mean over H and W.
// GlobalAvgPoolGrad(x, g[N,C]) -> dx = g / (H W) at every position; x is
//     read for its shape only.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops/shape_util.h"

namespace weft {
namespace {

using shape_util::ExpectFloat;
using shape_util::ExpectMinRank;
using shape_util::ExpectRank;
using shape_util::MergeDim;

absl::Status ExpectEpsilon(InferenceContext* c) {
  ASSIGN_OR_RETURN(float eps, GetFloatAttrOr(c->node, "epsilon", 1e-3f));
  if (!(eps > 0.0f) || !std::isfinite(eps)) return c->Error(absl::StrCat("epsilon must be positive, got ", eps));
  return absl::OkStatus();
}

// Input `i` (named `role`) is a float32 vector of x's channel count `*c`;
// merges an unknown count.
absl::Status ExpectChannelVector(InferenceContext* c, int i, absl::string_view role, int64_t* channels) {
  RETURN_IF_ERROR(ExpectFloat(c, i, role));
  RETURN_IF_ERROR(ExpectRank(c, i, 1, role));
  auto merged = MergeDim(*channels, c->input_shapes[i].dim(0));
  if (!merged.ok()) {
    return c->Error(absl::StrCat(role, " ", c->input_shapes[i].DebugString(), " needs one entry per channel of x (",
                                 *channels, ", x's last axis)"));
  }
  *channels = *merged;
  return absl::OkStatus();
}

// x (input `x_input`) is float32 of rank >= 2; returns its channel count.
absl::StatusOr<int64_t> ChannelsOf(InferenceContext* c, int x_input) {
  RETURN_IF_ERROR(ExpectFloat(c, x_input, "x"));
  RETURN_IF_ERROR(ExpectMinRank(c, x_input, 2, "x (batch, ..., channels)"));
  const TensorShape& x = c->input_shapes[x_input];
  return x.dim(x.rank() - 1);
}

absl::Status BatchNormShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectEpsilon(c));
  ASSIGN_OR_RETURN(int64_t ch, ChannelsOf(c, 0));
  RETURN_IF_ERROR(ExpectChannelVector(c, 1, "gamma", &ch));
  RETURN_IF_ERROR(ExpectChannelVector(c, 2, "beta", &ch));
  c->output_types = {DType::kFloat32, DType::kFloat32, DType::kFloat32, DType::kFloat32};
  c->output_shapes = {c->input_shapes[0], TensorShape{ch}, TensorShape{ch}, TensorShape{ch}};
  return absl::OkStatus();
}

absl::Status BatchNormGradShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(int64_t ch, ChannelsOf(c, 1));
  RETURN_IF_ERROR(ExpectFloat(c, 0, "dy"));
  if (!MergeShapes(c->input_shapes[0], c->input_shapes[1]).ok()) {
    return c->Error(absl::StrCat("dy ", c->input_shapes[0].DebugString(), " must have x's shape ",
                                 c->input_shapes[1].DebugString()));
  }
  RETURN_IF_ERROR(ExpectChannelVector(c, 2, "gamma", &ch));
  RETURN_IF_ERROR(ExpectChannelVector(c, 3, "mean", &ch));
  RETURN_IF_ERROR(ExpectChannelVector(c, 4, "inv_std", &ch));
  c->output_types = {DType::kFloat32, DType::kFloat32, DType::kFloat32};
  c->output_shapes = {c->input_shapes[1], TensorShape{ch}, TensorShape{ch}};
  return absl::OkStatus();
}

absl::Status BatchNormInferenceShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectEpsilon(c));
  ASSIGN_OR_RETURN(int64_t ch, ChannelsOf(c, 0));
  RETURN_IF_ERROR(ExpectChannelVector(c, 1, "gamma", &ch));
  RETURN_IF_ERROR(ExpectChannelVector(c, 2, "beta", &ch));
  RETURN_IF_ERROR(ExpectChannelVector(c, 3, "mean", &ch));
  RETURN_IF_ERROR(ExpectChannelVector(c, 4, "variance", &ch));
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = c->input_shapes[0];
  return absl::OkStatus();
}

absl::Status BatchNormGradFn(GradContext* c) {
  for (int i = 1; i < 4; ++i) {
    if (c->grad_outputs[i].valid()) {
      return absl::UnimplementedError(
          "no gradient flows through BatchNorm's batch statistics (outputs 1 to 3); use output 0");
    }
  }
  Node* g = c->builder->AddNode("BatchNormGrad",
                                {c->grad_outputs[0], c->inputs[0], c->inputs[1], c->outputs[1], c->outputs[3]});
  if (g == nullptr) return c->builder->status();
  c->grad_inputs = {Output(g, 0), Output(g, 1), Output(g, 2)};
  return absl::OkStatus();
}

absl::Status GlobalAvgPoolShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectFloat(c, 0, "x"));
  RETURN_IF_ERROR(ExpectRank(c, 0, 4, "x (NHWC)"));
  const TensorShape& x = c->input_shapes[0];
  if (x.dim(1) == 0 || x.dim(2) == 0) {
    return c->Error(absl::StrCat("x ", x.DebugString(), " has no positions to average"));
  }
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = TensorShape{x.dim(0), x.dim(3)};
  return absl::OkStatus();
}

absl::Status GlobalAvgPoolGradShape(InferenceContext* c) {
  RETURN_IF_ERROR(GlobalAvgPoolShape(c));
  RETURN_IF_ERROR(ExpectFloat(c, 1, "gradient"));
  if (!MergeShapes(c->output_shapes[0], c->input_shapes[1]).ok()) {
    return c->Error(absl::StrCat("gradient ", c->input_shapes[1].DebugString(), " must have the pooling output's shape ",
                                 c->output_shapes[0].DebugString()));
  }
  c->output_shapes[0] = c->input_shapes[0];
  return absl::OkStatus();
}

absl::Status GlobalAvgPoolGradFn(GradContext* c) {
  c->grad_inputs[0] = c->builder->Op("GlobalAvgPoolGrad", {c->inputs[0], c->grad_outputs[0]});
  return absl::OkStatus();
}

}  // namespace

WEFT_REGISTER_OP(OpDef{
    .name = "BatchNorm", .num_inputs = 3, .num_outputs = 4, .shape_fn = BatchNormShape, .grad_fn = BatchNormGradFn});
WEFT_REGISTER_OP(OpDef{.name = "BatchNormGrad", .num_inputs = 5, .num_outputs = 3, .shape_fn = BatchNormGradShape});
WEFT_REGISTER_OP(
    OpDef{.name = "BatchNormInference", .num_inputs = 5, .num_outputs = 1, .shape_fn = BatchNormInferenceShape});
WEFT_REGISTER_OP(OpDef{.name = "GlobalAvgPool",
                       .num_inputs = 1,
                       .num_outputs = 1,
                       .shape_fn = GlobalAvgPoolShape,
                       .grad_fn = GlobalAvgPoolGradFn});
WEFT_REGISTER_OP(
    OpDef{.name = "GlobalAvgPoolGrad", .num_inputs = 2, .num_outputs = 1, .shape_fn = GlobalAvgPoolGradShape});

}  // namespace weft
