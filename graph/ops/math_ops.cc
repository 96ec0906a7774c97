// Math ops: MatMul, BiasAdd(+Grad), elementwise Add/Sub/Mul/Neg, AddN,
// reductions Sum/Mean (+Grad), ScaleRows, RowDot, ArgMax and Equal.
//
// Elementwise binary ops take float32 operands of the same shape (unknown
// dims merge); Add, Sub and Mul also accept a scalar second operand, which is
// broadcast.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/gradients.h"
#include "graph/ops/compute_type.h"
#include "graph/op_registry.h"
#include "graph/ops/ops.h"
#include "graph/ops/shape_util.h"

namespace weft {
namespace {

using shape_util::ExpectFloat;
using shape_util::ExpectMinRank;
using shape_util::ExpectRank;
using shape_util::MergeDim;
using shape_util::MergeInputs;

// ---- MatMul ------------------------------------------------------------------

absl::Status MatMulShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(bool ta, GetBoolAttrOr(c->node, "transpose_a", false));
  ASSIGN_OR_RETURN(bool tb, GetBoolAttrOr(c->node, "transpose_b", false));
  RETURN_IF_ERROR(ComputeTypeOf(c->node).status());
  RETURN_IF_ERROR(ExpectFloat(c, 0, "a"));
  RETURN_IF_ERROR(ExpectFloat(c, 1, "b"));
  RETURN_IF_ERROR(ExpectRank(c, 0, 2, "a"));
  RETURN_IF_ERROR(ExpectRank(c, 1, 2, "b"));
  const TensorShape& a = c->input_shapes[0];
  const TensorShape& b = c->input_shapes[1];
  const int64_t m = ta ? a.dim(1) : a.dim(0);
  const int64_t k_a = ta ? a.dim(0) : a.dim(1);
  const int64_t k_b = tb ? b.dim(1) : b.dim(0);
  const int64_t n = tb ? b.dim(0) : b.dim(1);
  if (!MergeDim(k_a, k_b).ok()) {
    return c->Error(absl::StrCat("inner dimensions differ: ", a.DebugString(), ta ? "^T" : "", " x ", b.DebugString(),
                                 tb ? "^T" : "", " (", k_a, " vs ", k_b, ")"));
  }
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = TensorShape{m, n};
  return absl::OkStatus();
}

absl::Status MatMulGrad(GradContext* c) {
  ASSIGN_OR_RETURN(ComputeType compute, ComputeTypeOf(c->node->def()));
  ASSIGN_OR_RETURN(bool ta, GetBoolAttrOr(c->node->def(), "transpose_a", false));
  ASSIGN_OR_RETURN(bool tb, GetBoolAttrOr(c->node->def(), "transpose_b", false));
  GraphBuilder* b = c->builder;
  // The gradients' products compute in the forward product's precision.
  auto matmul = [&](Output p, Output q, bool tp, bool tq) {
    AttrList attrs = {Attr("transpose_a", tp), Attr("transpose_b", tq)};
    if (compute != ComputeType::kFloat32) attrs.push_back(Attr("compute_type", ComputeTypeName(compute)));
    return b->Op("MatMul", {p, q}, attrs);
  };
  const Output a = c->inputs[0], x = c->inputs[1], g = c->grad_outputs[0];
  if (!ta && !tb) {  // C = A B
    c->grad_inputs[0] = matmul(g, x, false, true);
    c->grad_inputs[1] = matmul(a, g, true, false);
  } else if (!ta && tb) {  // C = A B^T
    c->grad_inputs[0] = matmul(g, x, false, false);
    c->grad_inputs[1] = matmul(g, a, true, false);
  } else if (ta && !tb) {  // C = A^T B
    c->grad_inputs[0] = matmul(x, g, false, true);
    c->grad_inputs[1] = matmul(a, g, false, false);
  } else {  // C = A^T B^T
    c->grad_inputs[0] = matmul(x, g, true, true);
    c->grad_inputs[1] = matmul(g, a, true, true);
  }
  return absl::OkStatus();
}

// ---- BiasAdd -----------------------------------------------------------------

absl::Status BiasAddShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectFloat(c, 0, "x"));
  RETURN_IF_ERROR(ExpectFloat(c, 1, "bias"));
  RETURN_IF_ERROR(ExpectMinRank(c, 0, 1, "x"));
  RETURN_IF_ERROR(ExpectRank(c, 1, 1, "bias"));
  TensorShape out = c->input_shapes[0];
  const int last = out.rank() - 1;
  auto ch = MergeDim(out.dim(last), c->input_shapes[1].dim(0));
  if (!ch.ok()) {
    return c->Error(absl::StrCat("bias ", c->input_shapes[1].DebugString(), " must match the last dimension of x ",
                                 out.DebugString()));
  }
  out.set_dim(last, *ch);
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = out;
  return absl::OkStatus();
}

absl::Status BiasAddGrad(GradContext* c) {
  c->grad_inputs[0] = c->grad_outputs[0];
  c->grad_inputs[1] = ops::BiasAddGrad(c->builder, c->grad_outputs[0]);
  return absl::OkStatus();
}

absl::Status BiasAddGradShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectFloat(c, 0, "gradient"));
  RETURN_IF_ERROR(ExpectMinRank(c, 0, 1, "gradient"));
  const TensorShape& g = c->input_shapes[0];
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = TensorShape{g.dim(g.rank() - 1)};
  return absl::OkStatus();
}

// ---- Elementwise -------------------------------------------------------------

// Same shapes, or a scalar second operand.
absl::Status BinaryShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectFloat(c, 0, "x"));
  RETURN_IF_ERROR(ExpectFloat(c, 1, "y"));
  const TensorShape& x = c->input_shapes[0];
  const TensorShape& y = c->input_shapes[1];
  c->output_types[0] = DType::kFloat32;
  if (y.rank() == 0) {
    c->output_shapes[0] = x;
    return absl::OkStatus();
  }
  auto merged = MergeShapes(x, y);
  if (!merged.ok()) {
    return c->Error(absl::StrCat("incompatible shapes ", x.DebugString(), " and ", y.DebugString(),
                                 ": operands need the same shape, or a scalar second operand"));
  }
  c->output_shapes[0] = *merged;
  return absl::OkStatus();
}

// The gradient reaching a (possibly broadcast scalar) second operand.
Output ReduceForY(GradContext* c, Output dy) {
  if (c->inputs[1].shape().rank() == 0 && c->inputs[0].shape().rank() != 0) return ops::Sum(c->builder, dy);
  return dy;
}

absl::Status AddGrad(GradContext* c) {
  c->grad_inputs[0] = c->grad_outputs[0];
  c->grad_inputs[1] = ReduceForY(c, c->grad_outputs[0]);
  return absl::OkStatus();
}

absl::Status SubGrad(GradContext* c) {
  c->grad_inputs[0] = c->grad_outputs[0];
  c->grad_inputs[1] = ReduceForY(c, ops::Neg(c->builder, c->grad_outputs[0]));
  return absl::OkStatus();
}

absl::Status MulGrad(GradContext* c) {
  GraphBuilder* b = c->builder;
  const Output g = c->grad_outputs[0];
  c->grad_inputs[0] = ops::Mul(b, g, c->inputs[1]);
  c->grad_inputs[1] = ReduceForY(c, ops::Mul(b, g, c->inputs[0]));
  return absl::OkStatus();
}

absl::Status FloatUnchangedShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectFloat(c, 0, "x"));
  return UnchangedShape(c);
}

absl::Status NegGrad(GradContext* c) {
  c->grad_inputs[0] = ops::Neg(c->builder, c->grad_outputs[0]);
  return absl::OkStatus();
}

absl::Status AddNShape(InferenceContext* c) {
  TensorShape merged = c->input_shapes[0];
  for (int i = 0; i < static_cast<int>(c->input_types.size()); ++i) {
    RETURN_IF_ERROR(ExpectFloat(c, i, absl::StrCat("input ", i)));
    auto m = MergeShapes(merged, c->input_shapes[i]);
    if (!m.ok()) {
      return c->Error(absl::StrCat("input ", i, " has shape ", c->input_shapes[i].DebugString(),
                                   ", incompatible with the earlier inputs' ", merged.DebugString()));
    }
    merged = *m;
  }
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = merged;
  return absl::OkStatus();
}

absl::Status AddNGrad(GradContext* c) {
  for (Output& g : c->grad_inputs) g = c->grad_outputs[0];
  return absl::OkStatus();
}

// ---- Reductions ----------------------------------------------------------------

absl::Status ReduceAllShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectFloat(c, 0, "x"));
  return ScalarFloatShape(c);
}

absl::Status SumGrad(GradContext* c) {
  c->grad_inputs[0] = ops::SumGrad(c->builder, c->grad_outputs[0], c->inputs[0]);
  return absl::OkStatus();
}

absl::Status MeanGrad(GradContext* c) {
  c->grad_inputs[0] = ops::MeanGrad(c->builder, c->grad_outputs[0], c->inputs[0]);
  return absl::OkStatus();
}

// (g scalar, x) -> x's shape.
absl::Status ReduceGradShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectFloat(c, 0, "gradient"));
  RETURN_IF_ERROR(ExpectRank(c, 0, 0, "gradient"));
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = c->input_shapes[1];
  return absl::OkStatus();
}

// ---- Row-wise ------------------------------------------------------------------

absl::Status ScaleRowsShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectFloat(c, 0, "matrix"));
  RETURN_IF_ERROR(ExpectFloat(c, 1, "scale"));
  RETURN_IF_ERROR(ExpectRank(c, 0, 2, "matrix"));
  RETURN_IF_ERROR(ExpectRank(c, 1, 1, "scale"));
  TensorShape out = c->input_shapes[0];
  auto n = MergeDim(out.dim(0), c->input_shapes[1].dim(0));
  if (!n.ok()) {
    return c->Error(absl::StrCat("scale ", c->input_shapes[1].DebugString(), " needs one entry per row of matrix ",
                                 out.DebugString()));
  }
  out.set_dim(0, *n);
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = out;
  return absl::OkStatus();
}

absl::Status ScaleRowsGrad(GradContext* c) {
  GraphBuilder* b = c->builder;
  c->grad_inputs[0] = ops::ScaleRows(b, c->grad_outputs[0], c->inputs[1]);
  c->grad_inputs[1] = ops::RowDot(b, c->grad_outputs[0], c->inputs[0]);
  return absl::OkStatus();
}

absl::Status RowDotShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectFloat(c, 0, "x"));
  RETURN_IF_ERROR(ExpectFloat(c, 1, "y"));
  RETURN_IF_ERROR(ExpectRank(c, 0, 2, "x"));
  ASSIGN_OR_RETURN(TensorShape merged, MergeInputs(c, 0, 1, "x", "y"));
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = TensorShape{merged.dim(0)};
  return absl::OkStatus();
}

absl::Status RowDotGrad(GradContext* c) {
  GraphBuilder* b = c->builder;
  c->grad_inputs[0] = ops::ScaleRows(b, c->inputs[1], c->grad_outputs[0]);
  c->grad_inputs[1] = ops::ScaleRows(b, c->inputs[0], c->grad_outputs[0]);
  return absl::OkStatus();
}

// ---- Comparison ----------------------------------------------------------------

absl::Status ArgMaxShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectFloat(c, 0, "x"));
  RETURN_IF_ERROR(ExpectMinRank(c, 0, 1, "x"));
  TensorShape out = c->input_shapes[0];
  out.RemoveDim(out.rank() - 1);
  c->output_types[0] = DType::kInt32;
  c->output_shapes[0] = out;
  return absl::OkStatus();
}

absl::Status EqualShape(InferenceContext* c) {
  const DType t = c->input_types[0];
  if (t != DType::kFloat32 && t != DType::kInt32 && t != DType::kInt64 && t != DType::kBool) {
    return c->Error(absl::StrCat("x must be float32, int32, int64 or bool, got ", DTypeName(t)));
  }
  if (c->input_types[1] != t) {
    return c->Error(absl::StrCat("x and y must have the same dtype, got ", DTypeName(t), " and ",
                                 DTypeName(c->input_types[1])));
  }
  ASSIGN_OR_RETURN(c->output_shapes[0], MergeInputs(c, 0, 1, "x", "y"));
  c->output_types[0] = DType::kBool;
  return absl::OkStatus();
}

}  // namespace

// [m,k] x [k,n] -> [m,n]; attrs transpose_a, transpose_b (bool, default false)
// and compute_type (graph/ops/compute_type.h), which its gradients' MatMuls
// share.
WEFT_REGISTER_OP(
    OpDef{.name = "MatMul", .num_inputs = 2, .num_outputs = 1, .shape_fn = MatMulShape, .grad_fn = MatMulGrad});
// x[..., C] + bias[C].
WEFT_REGISTER_OP(
    OpDef{.name = "BiasAdd", .num_inputs = 2, .num_outputs = 1, .shape_fn = BiasAddShape, .grad_fn = BiasAddGrad});
// g[..., C] -> [C]: the sum over every axis but the last.
WEFT_REGISTER_OP(OpDef{.name = "BiasAddGrad", .num_inputs = 1, .num_outputs = 1, .shape_fn = BiasAddGradShape});
WEFT_REGISTER_OP(OpDef{.name = "Add", .num_inputs = 2, .num_outputs = 1, .shape_fn = BinaryShape, .grad_fn = AddGrad});
WEFT_REGISTER_OP(OpDef{.name = "Sub", .num_inputs = 2, .num_outputs = 1, .shape_fn = BinaryShape, .grad_fn = SubGrad});
WEFT_REGISTER_OP(OpDef{.name = "Mul", .num_inputs = 2, .num_outputs = 1, .shape_fn = BinaryShape, .grad_fn = MulGrad});
WEFT_REGISTER_OP(
    OpDef{.name = "Neg", .num_inputs = 1, .num_outputs = 1, .shape_fn = FloatUnchangedShape, .grad_fn = NegGrad});
// Variadic: the sum of one or more tensors of one shape.
WEFT_REGISTER_OP(
    OpDef{.name = "AddN", .num_inputs = -1, .num_outputs = 1, .shape_fn = AddNShape, .grad_fn = AddNGrad});
// Sum / mean of every element -> float32 scalar.
WEFT_REGISTER_OP(
    OpDef{.name = "Sum", .num_inputs = 1, .num_outputs = 1, .shape_fn = ReduceAllShape, .grad_fn = SumGrad});
WEFT_REGISTER_OP(
    OpDef{.name = "Mean", .num_inputs = 1, .num_outputs = 1, .shape_fn = ReduceAllShape, .grad_fn = MeanGrad});
// (g scalar, x) -> x's shape filled with g (SumGrad) or g / x.NumElements() (MeanGrad).
WEFT_REGISTER_OP(OpDef{.name = "SumGrad", .num_inputs = 2, .num_outputs = 1, .shape_fn = ReduceGradShape});
WEFT_REGISTER_OP(OpDef{.name = "MeanGrad", .num_inputs = 2, .num_outputs = 1, .shape_fn = ReduceGradShape});
// m[N,C] * s[N][:, None].
WEFT_REGISTER_OP(OpDef{
    .name = "ScaleRows", .num_inputs = 2, .num_outputs = 1, .shape_fn = ScaleRowsShape, .grad_fn = ScaleRowsGrad});
// x[N,C], y[N,C] -> [N]: per-row dot products.
WEFT_REGISTER_OP(
    OpDef{.name = "RowDot", .num_inputs = 2, .num_outputs = 1, .shape_fn = RowDotShape, .grad_fn = RowDotGrad});
// float32 x[..., C] -> int32 index of the first maximum along the last axis.
WEFT_REGISTER_OP(OpDef{.name = "ArgMax", .num_inputs = 1, .num_outputs = 1, .shape_fn = ArgMaxShape});
// Elementwise x == y -> bool.
WEFT_REGISTER_OP(OpDef{.name = "Equal", .num_inputs = 2, .num_outputs = 1, .shape_fn = EqualShape});

}  // namespace weft
