// Synchronised batch normalisation, as three ops around a CrossReplicaSum
// (graph/ops/collective_ops.cc), so that replicas normalise with the
// statistics of the global batch. The model lowering writes, for a
// batch_norm layer with `synchronized`:
//
//   (sum, sum_squares, count) = BatchNormSums(x)
//   (S, SS, N)                = CrossReplicaSum(sum, sum_squares, count)
//   (y, mean, variance, inv_std) = BatchNormFromSums(x, gamma, beta, S, SS, N)
//
// On one replica CrossReplicaSum is the identity; the strategy rewrites
// make it an all-reduce (sum) across the replicas. Autodiff then writes
// the backward pass with one more CrossReplicaSum, of the gradients of the
// sums, so one collective meets each way, as PyTorch's SyncBatchNorm does.
// As in norm_ops.cc the channel is x's last axis.
//
// BatchNormSums(x) -> (sum[C], sum_squares[C], count[])
//     per-channel sums over the rows (accumulated in double) and the row
//     count, as float32.
// BatchNormSumsGrad(x, g_sum[C], g_sum_squares[C]) -> dx = g_sum + 2 x g_sum_squares
// BatchNormFromSums(x, gamma, beta, sum, sum_squares, count)
//         -> (y, mean, variance, inv_std)
//     mean = sum / count, biased variance v = sum_squares / count - mean^2
//     (clamped at 0), the rest as BatchNorm (unbiased `variance` for the
//     moving average, inv_std = 1 / sqrt(v + epsilon)). Attr epsilon.
//     E[x^2] - E[x]^2 cancels where |mean| is many times the deviation;
//     the sums are double until they are stored, which keeps the variance
//     to float precision for the activations of a normalised network.
// BatchNormFromSumsGrad(dy, x, gamma, mean, inv_std, count)
//         -> (dx, dgamma, dbeta, dsum, dsum_squares)
//     the gradient through y's direct use of x (dx = gamma inv_std dy) and,
//     with this replica's sums of dy and dy xhat, the gradients of the
//     global sums: dsum = (dmean - 2 mean dvar) / count, dsum_squares =
//     dvar / count, where dmean = -gamma inv_std sum dy and dvar = -gamma
//     inv_std^2 sum(dy xhat) / 2.
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

// x (input `i`) is float32 of rank >= 2; returns its channel count.
absl::StatusOr<int64_t> ChannelsOf(InferenceContext* c, int i, absl::string_view role) {
  RETURN_IF_ERROR(ExpectFloat(c, i, role));
  RETURN_IF_ERROR(ExpectMinRank(c, i, 2, absl::StrCat(role, " (batch, ..., channels)")));
  const TensorShape& x = c->input_shapes[i];
  return x.dim(x.rank() - 1);
}

// Inputs [first, first + roles.size()) are float32 vectors of `*channels`.
absl::Status ExpectChannelVectors(InferenceContext* c, int first, std::initializer_list<const char*> roles,
                                  int64_t* channels) {
  int i = first;
  for (const char* role : roles) {
    RETURN_IF_ERROR(ExpectFloat(c, i, role));
    RETURN_IF_ERROR(ExpectRank(c, i, 1, role));
    auto merged = MergeDim(*channels, c->input_shapes[i].dim(0));
    if (!merged.ok()) {
      return c->Error(absl::StrCat(role, " ", c->input_shapes[i].DebugString(), " needs one entry per channel of x (",
                                   *channels, ", x's last axis)"));
    }
    *channels = *merged;
    ++i;
  }
  return absl::OkStatus();
}

absl::Status ExpectCount(InferenceContext* c, int i) {
  RETURN_IF_ERROR(ExpectFloat(c, i, "count"));
  return ExpectRank(c, i, 0, "count (a scalar)");
}

absl::Status ExpectEpsilon(InferenceContext* c) {
  ASSIGN_OR_RETURN(float eps, GetFloatAttrOr(c->node, "epsilon", 1e-3f));
  if (!(eps > 0.0f) || !std::isfinite(eps)) return c->Error(absl::StrCat("epsilon must be positive, got ", eps));
  return absl::OkStatus();
}

absl::Status SumsShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(int64_t ch, ChannelsOf(c, 0, "x"));
  c->output_types = {DType::kFloat32, DType::kFloat32, DType::kFloat32};
  c->output_shapes = {TensorShape{ch}, TensorShape{ch}, TensorShape{}};
  return absl::OkStatus();
}

absl::Status SumsGradShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(int64_t ch, ChannelsOf(c, 0, "x"));
  RETURN_IF_ERROR(ExpectChannelVectors(c, 1, {"g_sum", "g_sum_squares"}, &ch));
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = c->input_shapes[0];
  return absl::OkStatus();
}

absl::Status FromSumsShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectEpsilon(c));
  ASSIGN_OR_RETURN(int64_t ch, ChannelsOf(c, 0, "x"));
  RETURN_IF_ERROR(ExpectChannelVectors(c, 1, {"gamma", "beta", "sum", "sum_squares"}, &ch));
  RETURN_IF_ERROR(ExpectCount(c, 5));
  c->output_types = {DType::kFloat32, DType::kFloat32, DType::kFloat32, DType::kFloat32};
  c->output_shapes = {c->input_shapes[0], TensorShape{ch}, TensorShape{ch}, TensorShape{ch}};
  return absl::OkStatus();
}

absl::Status FromSumsGradShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(int64_t ch, ChannelsOf(c, 1, "x"));
  RETURN_IF_ERROR(ExpectFloat(c, 0, "dy"));
  if (!MergeShapes(c->input_shapes[0], c->input_shapes[1]).ok()) {
    return c->Error(absl::StrCat("dy ", c->input_shapes[0].DebugString(), " must have x's shape ",
                                 c->input_shapes[1].DebugString()));
  }
  RETURN_IF_ERROR(ExpectChannelVectors(c, 2, {"gamma", "mean", "inv_std"}, &ch));
  RETURN_IF_ERROR(ExpectCount(c, 5));
  c->output_types.assign(5, DType::kFloat32);
  c->output_shapes = {c->input_shapes[1], TensorShape{ch}, TensorShape{ch}, TensorShape{ch}, TensorShape{ch}};
  return absl::OkStatus();
}

absl::Status SumsGradFn(GradContext* c) {
  if (c->grad_outputs[2].valid()) return absl::UnimplementedError("BatchNormSums' count has no gradient");
  if (!c->grad_outputs[0].valid() || !c->grad_outputs[1].valid()) {
    return absl::UnimplementedError(
        "BatchNormSums needs the gradients of both sums (it feeds BatchNormFromSums through a CrossReplicaSum)");
  }
  c->grad_inputs[0] = c->builder->Op("BatchNormSumsGrad", {c->inputs[0], c->grad_outputs[0], c->grad_outputs[1]});
  return absl::OkStatus();
}

absl::Status FromSumsGradFn(GradContext* c) {
  for (int i = 1; i < 4; ++i) {
    if (c->grad_outputs[i].valid()) {
      return absl::UnimplementedError(
          "no gradient flows through BatchNormFromSums' batch statistics (outputs 1 to 3); use output 0");
    }
  }
  Node* g = c->builder->AddNode(
      "BatchNormFromSumsGrad",
      {c->grad_outputs[0], c->inputs[0], c->inputs[1], c->outputs[1], c->outputs[3], c->inputs[5]});
  if (g == nullptr) return c->builder->status();
  // count (input 5) has no gradient: it is the number of rows.
  c->grad_inputs = {Output(g, 0), Output(g, 1), Output(g, 2), Output(g, 3), Output(g, 4), Output()};
  return absl::OkStatus();
}

}  // namespace

WEFT_REGISTER_OP(OpDef{
    .name = "BatchNormSums", .num_inputs = 1, .num_outputs = 3, .shape_fn = SumsShape, .grad_fn = SumsGradFn});
WEFT_REGISTER_OP(OpDef{.name = "BatchNormSumsGrad", .num_inputs = 3, .num_outputs = 1, .shape_fn = SumsGradShape});
WEFT_REGISTER_OP(OpDef{.name = "BatchNormFromSums",
                       .num_inputs = 6,
                       .num_outputs = 4,
                       .shape_fn = FromSumsShape,
                       .grad_fn = FromSumsGradFn});
WEFT_REGISTER_OP(
    OpDef{.name = "BatchNormFromSumsGrad", .num_inputs = 6, .num_outputs = 5, .shape_fn = FromSumsGradShape});

}  // namespace weft
