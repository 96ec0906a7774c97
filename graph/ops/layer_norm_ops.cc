// Layer normalisation ops. x is viewed as M = x.num_elements / C rows of
// C channels (its last axis: the features of a [batch, features] matrix,
// the channels of each NHWC position); unlike BatchNorm (norm_ops.cc), the
// statistics are per row, over its C channels, so every example is
// normalised on its own and training and evaluation compute the same thing.
//
// LayerNorm(x, gamma[C], beta[C]) -> (y, mean[M], inv_std[M])
//     mean and biased variance v of each row, inv_std = 1 / sqrt(v +
//     epsilon), y = (x - mean_row) inv_std_row gamma + beta. Attr epsilon
//     (default 1e-3, as Keras's; positive and finite). x is float32 of rank
//     >= 2 with a non-empty last axis; M may be 0 (an empty batch). Gradients
//     flow from y only.
// LayerNormGrad(dy, x, gamma, mean, inv_std) -> (dx, dgamma, dbeta)
//     With xhat = (x - mean_row) inv_std_row and g = dy gamma:
//     dbeta = sum over rows of dy, dgamma = sum over rows of dy xhat,
//     dx = inv_std_row (g - mean_row(g) - xhat mean_row(g xhat)).
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
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

// x's view as rows of channels; -1 where unknown.
struct RowsAndChannels {
  int64_t rows = -1;
  int64_t channels = -1;
};

// x (input `x_input`) is float32 of rank >= 2 with a non-empty last axis.
absl::StatusOr<RowsAndChannels> RowsOf(InferenceContext* c, int x_input) {
  RETURN_IF_ERROR(ExpectFloat(c, x_input, "x"));
  RETURN_IF_ERROR(ExpectMinRank(c, x_input, 2, "x (batch, ..., channels)"));
  const TensorShape& x = c->input_shapes[x_input];
  RowsAndChannels g;
  g.channels = x.dim(x.rank() - 1);
  if (g.channels == 0) {
    return c->Error(absl::StrCat("x ", x.DebugString(), " has an empty last axis: a row of no values has no mean"));
  }
  g.rows = 1;
  for (int d = 0; d + 1 < x.rank(); ++d) {
    if (x.dim(d) < 0) {
      g.rows = -1;
      break;
    }
    if (!CheckedMul(g.rows, x.dim(d), &g.rows)) {
      return c->Error(absl::StrCat("x ", x.DebugString(), " has more rows than 64 bits count"));
    }
  }
  return g;
}

// Input `i` (named `role`) is a float32 vector of length *n, one entry per
// `per` ("channel of x (x's last axis)", "row of x"); merges an unknown
// length.
absl::Status ExpectVector(InferenceContext* c, int i, absl::string_view role, absl::string_view per, int64_t* n) {
  RETURN_IF_ERROR(ExpectFloat(c, i, role));
  RETURN_IF_ERROR(ExpectRank(c, i, 1, role));
  auto merged = MergeDim(*n, c->input_shapes[i].dim(0));
  if (!merged.ok()) {
    return c->Error(absl::StrCat(role, " ", c->input_shapes[i].DebugString(), " needs one entry per ", per, " (",
                                 *n, ")"));
  }
  *n = *merged;
  return absl::OkStatus();
}

constexpr char kPerChannel[] = "channel of x (x's last axis)";
constexpr char kPerRow[] = "row of x (its elements / its last axis)";

absl::Status LayerNormShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectEpsilon(c));
  ASSIGN_OR_RETURN(RowsAndChannels g, RowsOf(c, 0));
  RETURN_IF_ERROR(ExpectVector(c, 1, "gamma", kPerChannel, &g.channels));
  RETURN_IF_ERROR(ExpectVector(c, 2, "beta", kPerChannel, &g.channels));
  TensorShape y = c->input_shapes[0];
  y.set_dim(y.rank() - 1, g.channels);  // gamma's or beta's length when x's is unknown
  c->output_types = {DType::kFloat32, DType::kFloat32, DType::kFloat32};
  c->output_shapes = {y, TensorShape{g.rows}, TensorShape{g.rows}};
  return absl::OkStatus();
}

absl::Status LayerNormGradShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(RowsAndChannels g, RowsOf(c, 1));
  RETURN_IF_ERROR(ExpectFloat(c, 0, "dy"));
  if (!MergeShapes(c->input_shapes[0], c->input_shapes[1]).ok()) {
    return c->Error(absl::StrCat("dy ", c->input_shapes[0].DebugString(), " must have x's shape ",
                                 c->input_shapes[1].DebugString()));
  }
  RETURN_IF_ERROR(ExpectVector(c, 2, "gamma", kPerChannel, &g.channels));
  RETURN_IF_ERROR(ExpectVector(c, 3, "mean", kPerRow, &g.rows));
  RETURN_IF_ERROR(ExpectVector(c, 4, "inv_std", kPerRow, &g.rows));
  TensorShape dx = c->input_shapes[1];
  dx.set_dim(dx.rank() - 1, g.channels);
  c->output_types = {DType::kFloat32, DType::kFloat32, DType::kFloat32};
  c->output_shapes = {dx, TensorShape{g.channels}, TensorShape{g.channels}};
  return absl::OkStatus();
}

absl::Status LayerNormGradFn(GradContext* c) {
  for (int i = 1; i < 3; ++i) {
    if (c->grad_outputs[i].valid()) {
      return absl::UnimplementedError(
          "no gradient flows through LayerNorm's row statistics (outputs 1 and 2); use output 0");
    }
  }
  Node* g = c->builder->AddNode("LayerNormGrad",
                                {c->grad_outputs[0], c->inputs[0], c->inputs[1], c->outputs[1], c->outputs[2]});
  if (g == nullptr) return c->builder->status();
  c->grad_inputs = {Output(g, 0), Output(g, 1), Output(g, 2)};
  return absl::OkStatus();
}

}  // namespace

WEFT_REGISTER_OP(OpDef{
    .name = "LayerNorm", .num_inputs = 3, .num_outputs = 3, .shape_fn = LayerNormShape, .grad_fn = LayerNormGradFn});
WEFT_REGISTER_OP(OpDef{.name = "LayerNormGrad", .num_inputs = 5, .num_outputs = 3, .shape_fn = LayerNormGradShape});

}  // namespace weft
