// Array ops: Reshape, ReshapeLike and Cast.
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops/ops.h"

namespace weft {
namespace {

std::string DimsString(const std::vector<int64_t>& dims) { return absl::StrCat("[", absl::StrJoin(dims, ","), "]"); }

absl::Status ReshapeShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, GetIntListAttr(c->node, "shape"));
  int unknown = -1;
  int64_t known = 1;
  for (int i = 0; i < static_cast<int>(dims.size()); ++i) {
    if (dims[i] == -1) {
      if (unknown >= 0) return c->Error(absl::StrCat("target shape ", DimsString(dims), " has more than one -1"));
      unknown = i;
    } else if (dims[i] < 0) {
      return c->Error(absl::StrCat("target shape ", DimsString(dims), " has a negative dimension"));
    } else {
      known *= dims[i];
    }
  }
  const TensorShape& x = c->input_shapes[0];
  TensorShape out(dims);
  if (x.IsFullyDefined()) {
    const int64_t n = x.num_elements();
    if (unknown >= 0) {
      if (known == 0 || n % known != 0) {
        return c->Error(absl::StrCat("cannot reshape ", x.DebugString(), " (", n, " elements) to ", DimsString(dims)));
      }
      out.set_dim(unknown, n / known);
    } else if (n != known) {
      return c->Error(absl::StrCat("cannot reshape ", x.DebugString(), " (", n, " elements) to ", DimsString(dims),
                                   " (", known, " elements)"));
    }
  } else if (unknown < 0) {
    // Some input dims are unknown: the known ones must still divide the target's size.
    int64_t x_known = 1;
    for (int64_t d : x.dims()) x_known *= d < 0 ? 1 : d;
    if (x_known != 0 && known % x_known != 0) {
      return c->Error(absl::StrCat("cannot reshape ", x.DebugString(), " to ", DimsString(dims), ": ", known,
                                   " elements is not a multiple of ", x_known));
    }
  }
  c->output_types[0] = c->input_types[0];
  c->output_shapes[0] = out;
  return absl::OkStatus();
}

absl::Status ReshapeGrad(GradContext* c) {
  c->grad_inputs[0] = ops::ReshapeLike(c->builder, c->grad_outputs[0], c->inputs[0]);
  return absl::OkStatus();
}

absl::Status ReshapeLikeShape(InferenceContext* c) {
  const TensorShape& x = c->input_shapes[0];
  const TensorShape& like = c->input_shapes[1];
  if (x.IsFullyDefined() && like.IsFullyDefined() && x.num_elements() != like.num_elements()) {
    return c->Error(absl::StrCat("cannot reshape ", x.DebugString(), " (", x.num_elements(), " elements) like ",
                                 like.DebugString(), " (", like.num_elements(), " elements)"));
  }
  c->output_types[0] = c->input_types[0];
  c->output_shapes[0] = like;
  return absl::OkStatus();
}

absl::Status ReshapeLikeGrad(GradContext* c) {
  c->grad_inputs[0] = ops::ReshapeLike(c->builder, c->grad_outputs[0], c->inputs[0]);
  return absl::OkStatus();  // `like` gives only its shape
}

bool Castable(DType t) {
  return t == DType::kFloat32 || t == DType::kInt32 || t == DType::kInt64 || t == DType::kBool;
}

absl::Status CastShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(DType to, GetTypeAttr(c->node, "dtype"));
  const DType from = c->input_types[0];
  if (!Castable(from) || !Castable(to)) {
    return c->Error(absl::StrCat("cannot cast ", DTypeName(from), " to ", DTypeName(to),
                                 " (supported: float32, int32, int64, bool)"));
  }
  c->output_types[0] = to;
  c->output_shapes[0] = c->input_shapes[0];
  return absl::OkStatus();
}

absl::Status CastGrad(GradContext* c) {
  // Only float32 -> float32 (the identity) carries a gradient.
  if (c->inputs[0].dtype() == DType::kFloat32 && c->outputs[0].dtype() == DType::kFloat32) {
    c->grad_inputs[0] = c->grad_outputs[0];
  }
  return absl::OkStatus();
}

}  // namespace

// x -> x with attr `shape` (list of int, at most one -1), sharing x's buffer.
WEFT_REGISTER_OP(
    OpDef{.name = "Reshape", .num_inputs = 1, .num_outputs = 1, .shape_fn = ReshapeShape, .grad_fn = ReshapeGrad});
// (x, like) -> x with like's run-time shape (same element count).
WEFT_REGISTER_OP(OpDef{
    .name = "ReshapeLike", .num_inputs = 2, .num_outputs = 1, .shape_fn = ReshapeLikeShape, .grad_fn = ReshapeLikeGrad});
// x -> x converted to attr `dtype` (float32, int32, int64, bool; float -> int
// truncates toward zero, nonzero -> true).
WEFT_REGISTER_OP(
    OpDef{.name = "Cast", .num_inputs = 1, .num_outputs = 1, .shape_fn = CastShape, .grad_fn = CastGrad});

}  // namespace weft
