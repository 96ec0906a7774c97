// Array ops: Reshape, ReshapeLike and Cast.
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops/ops.h"
#include "graph/ops/shape_util.h"

namespace weft {
namespace {

std::string DimsString(const std::vector<int64_t>& dims) { return absl::StrCat("[", absl::StrJoin(dims, ","), "]"); }

absl::Status ReshapeShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(std::vector<int64_t> attr, GetIntListAttr(c->node, "shape"));
  absl::StatusOr<shape_util::ReshapeTarget> target = shape_util::ParseReshapeTarget(std::move(attr));
  if (!target.ok()) return c->Error(target.status().message());
  const std::vector<int64_t>& dims = target->dims;
  const int unknown = target->unknown;
  const int64_t known = target->known;
  const TensorShape& x = c->input_shapes[0];
  TensorShape out(dims);
  if (x.IsFullyDefined()) {
    absl::StatusOr<int64_t> n_or = CheckedNumElements(x.dims(), "input");
    if (!n_or.ok()) return c->Error(n_or.status().message());
    const int64_t n = *n_or;
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
    for (int64_t d : x.dims()) {
      if (d >= 0 && !CheckedMul(x_known, d, &x_known)) {
        return c->Error(absl::StrCat("input ", x.DebugString(), ": its known dims overflow 64 bits"));
      }
    }
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
  for (const TensorShape* s : {&x, &like}) {
    // num_elements() is -1 past 64 bits, so the comparison below cannot be
    // fooled by a wrapped count; say so rather than print -1.
    if (s->IsFullyDefined() && s->num_elements() < 0) {
      return c->Error(absl::StrCat(s == &x ? "x " : "like ", s->DebugString(), ": the number of elements overflows 64 bits"));
    }
  }
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
