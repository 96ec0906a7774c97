// Neural-network ops: activations (+Grad), Softmax (+Grad), the sparse
// softmax cross-entropy loss, Conv2D (+backprops), MaxPool (+Grad), Dropout.
//
// Images are NHWC, convolution filters HWIO.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops/ops.h"
#include "graph/ops/shape_util.h"
#include "graph/ops/window_geometry.h"

namespace weft {
namespace {

using shape_util::ExpectFloat;
using shape_util::ExpectMinRank;
using shape_util::ExpectRank;
using shape_util::ExpectType;
using shape_util::MergeDim;
using shape_util::MergeInputs;

// ---- Activations ---------------------------------------------------------------

absl::Status FloatUnchangedShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectFloat(c, 0, "x"));
  return UnchangedShape(c);
}

// (a, b) of one shape, both float32 -> that shape.
absl::Status FloatPairShape(InferenceContext* c, absl::string_view role_a, absl::string_view role_b) {
  RETURN_IF_ERROR(ExpectFloat(c, 0, role_a));
  RETURN_IF_ERROR(ExpectFloat(c, 1, role_b));
  ASSIGN_OR_RETURN(c->output_shapes[0], MergeInputs(c, 0, 1, role_a, role_b));
  c->output_types[0] = DType::kFloat32;
  return absl::OkStatus();
}
absl::Status ReluGradShape(InferenceContext* c) { return FloatPairShape(c, "gradient", "x"); }
absl::Status YGradShape(InferenceContext* c) { return FloatPairShape(c, "y", "gradient"); }

absl::Status ReluGradFn(GradContext* c) {
  c->grad_inputs[0] = ops::ReluGrad(c->builder, c->grad_outputs[0], c->inputs[0]);
  return absl::OkStatus();
}
absl::Status SigmoidGradFn(GradContext* c) {
  c->grad_inputs[0] = ops::SigmoidGrad(c->builder, c->outputs[0], c->grad_outputs[0]);
  return absl::OkStatus();
}
absl::Status TanhGradFn(GradContext* c) {
  c->grad_inputs[0] = ops::TanhGrad(c->builder, c->outputs[0], c->grad_outputs[0]);
  return absl::OkStatus();
}

absl::Status SoftmaxShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectFloat(c, 0, "logits"));
  RETURN_IF_ERROR(ExpectMinRank(c, 0, 1, "logits"));
  return UnchangedShape(c);
}
absl::Status SoftmaxGradFn(GradContext* c) {
  c->grad_inputs[0] = ops::SoftmaxGrad(c->builder, c->outputs[0], c->grad_outputs[0]);
  return absl::OkStatus();
}

// ---- Loss ------------------------------------------------------------------------

absl::Status XentShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectFloat(c, 0, "logits"));
  RETURN_IF_ERROR(ExpectType(c, 1, DType::kInt32, "labels"));
  RETURN_IF_ERROR(ExpectRank(c, 0, 2, "logits"));
  RETURN_IF_ERROR(ExpectRank(c, 1, 1, "labels"));
  const TensorShape& logits = c->input_shapes[0];
  auto n = MergeDim(logits.dim(0), c->input_shapes[1].dim(0));
  if (!n.ok()) {
    return c->Error(absl::StrCat("labels ", c->input_shapes[1].DebugString(), " need one entry per row of logits ",
                                 logits.DebugString()));
  }
  c->output_types = {DType::kFloat32, DType::kFloat32};
  c->output_shapes = {TensorShape{*n}, TensorShape{*n, logits.dim(1)}};
  return absl::OkStatus();
}

absl::Status XentGrad(GradContext* c) {
  if (c->grad_outputs[1].valid()) {
    return absl::UnimplementedError("no gradient through the backprop output (second derivatives)");
  }
  c->grad_inputs[0] = ops::ScaleRows(c->builder, c->outputs[1], c->grad_outputs[0]);
  return absl::OkStatus();  // labels: none
}

// ---- Conv2D ------------------------------------------------------------------------

// The output shape of Conv2D(x, filter) given the node's attributes.
absl::StatusOr<TensorShape> ConvOutputShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(ConvParams p, GetConvParams(c->node));
  RETURN_IF_ERROR(ExpectFloat(c, 0, "x"));
  RETURN_IF_ERROR(ExpectFloat(c, 1, "filter"));
  RETURN_IF_ERROR(ExpectRank(c, 0, 4, "x (NHWC)"));
  RETURN_IF_ERROR(ExpectRank(c, 1, 4, "filter (HWIO)"));
  const TensorShape& x = c->input_shapes[0];
  const TensorShape& f = c->input_shapes[1];
  if (!MergeDim(x.dim(3), f.dim(2)).ok()) {
    return c->Error(absl::StrCat("x ", x.DebugString(), " has ", x.dim(3), " channels but filter ", f.DebugString(),
                                 " expects ", f.dim(2)));
  }
  int64_t out[2] = {-1, -1};
  for (int i = 0; i < 2; ++i) {
    if (f.dim(i) < 0) continue;
    auto w = ComputeWindow(x.dim(1 + i), f.dim(i), p.stride, p.padding, i == 0 ? "input height" : "input width");
    if (!w.ok()) return c->Error(absl::StrCat(w.status().message(), " (x ", x.DebugString(), ", filter ",
                                              f.DebugString(), ")"));
    out[i] = w->out;
  }
  return TensorShape{x.dim(0), out[0], out[1], f.dim(3)};
}

absl::Status Conv2DShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(c->output_shapes[0], ConvOutputShape(c));
  c->output_types[0] = DType::kFloat32;
  return absl::OkStatus();
}

// (x, filter, g): g must have the forward output's shape.
absl::Status ConvBackpropShape(InferenceContext* c, int result_input) {
  ASSIGN_OR_RETURN(TensorShape y, ConvOutputShape(c));
  RETURN_IF_ERROR(ExpectFloat(c, 2, "gradient"));
  if (!MergeShapes(y, c->input_shapes[2]).ok()) {
    return c->Error(absl::StrCat("gradient ", c->input_shapes[2].DebugString(),
                                 " does not match the convolution's output ", y.DebugString()));
  }
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = c->input_shapes[result_input];
  return absl::OkStatus();
}
absl::Status ConvBackpropInputShape(InferenceContext* c) { return ConvBackpropShape(c, 0); }
absl::Status ConvBackpropFilterShape(InferenceContext* c) { return ConvBackpropShape(c, 1); }

absl::Status Conv2DGrad(GradContext* c) {
  ASSIGN_OR_RETURN(ConvParams p, GetConvParams(c->node->def()));
  const std::string padding = p.padding == Padding::kSame ? "SAME" : "VALID";
  GraphBuilder* b = c->builder;
  const Output x = c->inputs[0], f = c->inputs[1], g = c->grad_outputs[0];
  c->grad_inputs[0] = ops::Conv2DBackpropInput(b, x, f, g, p.stride, padding);
  c->grad_inputs[1] = ops::Conv2DBackpropFilter(b, x, f, g, p.stride, padding);
  return absl::OkStatus();
}

// ---- MaxPool -----------------------------------------------------------------------

// (x, y, g) -> x's shape.
absl::Status MaxPoolGradShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(TensorShape y, PoolOutputShape(c));
  RETURN_IF_ERROR(ExpectFloat(c, 1, "y"));
  RETURN_IF_ERROR(ExpectFloat(c, 2, "gradient"));
  for (int i = 1; i <= 2; ++i) {
    if (!MergeShapes(y, c->input_shapes[i]).ok()) {
      return c->Error(absl::StrCat(i == 1 ? "y " : "gradient ", c->input_shapes[i].DebugString(),
                                   " does not match the pooling output ", y.DebugString()));
    }
  }
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = c->input_shapes[0];
  return absl::OkStatus();
}

absl::Status MaxPoolGradFn(GradContext* c) {
  const NodeDef& def = c->node->def();
  AttrList attrs;
  for (const char* name : {"ksize", "stride", "padding"}) {
    auto it = def.attr().find(name);
    if (it != def.attr().end()) attrs.emplace_back(name, it->second);
  }
  c->grad_inputs[0] = c->builder->Op("MaxPoolGrad", {c->inputs[0], c->outputs[0], c->grad_outputs[0]}, attrs);
  return absl::OkStatus();
}

// ---- Dropout -----------------------------------------------------------------------

absl::Status DropoutShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(float rate, GetFloatAttr(c->node, "rate"));
  if (!(rate >= 0.0f && rate < 1.0f)) return c->Error(absl::StrCat("rate must be in [0, 1), got ", rate));
  RETURN_IF_ERROR(GetIntAttrOr(c->node, "seed", 0).status());
  RETURN_IF_ERROR(ExpectFloat(c, 0, "x"));
  c->output_types = {DType::kFloat32, DType::kFloat32};
  c->output_shapes = {c->input_shapes[0], c->input_shapes[0]};
  return absl::OkStatus();
}

absl::Status DropoutGrad(GradContext* c) {
  if (c->grad_outputs[0].valid()) c->grad_inputs[0] = ops::Mul(c->builder, c->grad_outputs[0], c->outputs[1]);
  return absl::OkStatus();  // the mask does not depend on x
}

}  // namespace

absl::StatusOr<TensorShape> PoolOutputShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(PoolParams p, GetPoolParams(c->node));
  RETURN_IF_ERROR(ExpectFloat(c, 0, "x"));
  RETURN_IF_ERROR(ExpectRank(c, 0, 4, "x (NHWC)"));
  const TensorShape& x = c->input_shapes[0];
  int64_t out[2];
  for (int i = 0; i < 2; ++i) {
    auto w = ComputeWindow(x.dim(1 + i), p.ksize, p.stride, p.padding, i == 0 ? "input height" : "input width");
    if (!w.ok()) return c->Error(absl::StrCat(w.status().message(), " (x ", x.DebugString(), ")"));
    out[i] = w->out;
  }
  return TensorShape{x.dim(0), out[0], out[1], x.dim(3)};
}

absl::Status PoolShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(c->output_shapes[0], PoolOutputShape(c));
  c->output_types[0] = DType::kFloat32;
  return absl::OkStatus();
}


WEFT_REGISTER_OP(
    OpDef{.name = "Relu", .num_inputs = 1, .num_outputs = 1, .shape_fn = FloatUnchangedShape, .grad_fn = ReluGradFn});
// (g, x) -> g * (x > 0).
WEFT_REGISTER_OP(OpDef{.name = "ReluGrad", .num_inputs = 2, .num_outputs = 1, .shape_fn = ReluGradShape});
WEFT_REGISTER_OP(OpDef{
    .name = "Sigmoid", .num_inputs = 1, .num_outputs = 1, .shape_fn = FloatUnchangedShape, .grad_fn = SigmoidGradFn});
// (y, g) -> g * y * (1 - y), y = Sigmoid(x).
WEFT_REGISTER_OP(OpDef{.name = "SigmoidGrad", .num_inputs = 2, .num_outputs = 1, .shape_fn = YGradShape});
WEFT_REGISTER_OP(
    OpDef{.name = "Tanh", .num_inputs = 1, .num_outputs = 1, .shape_fn = FloatUnchangedShape, .grad_fn = TanhGradFn});
// (y, g) -> g * (1 - y^2), y = Tanh(x).
WEFT_REGISTER_OP(OpDef{.name = "TanhGrad", .num_inputs = 2, .num_outputs = 1, .shape_fn = YGradShape});
// Softmax over the last axis.
WEFT_REGISTER_OP(
    OpDef{.name = "Softmax", .num_inputs = 1, .num_outputs = 1, .shape_fn = SoftmaxShape, .grad_fn = SoftmaxGradFn});
// (y, g) -> y * (g - sum(g * y, last axis)), y = Softmax(x).
WEFT_REGISTER_OP(OpDef{.name = "SoftmaxGrad", .num_inputs = 2, .num_outputs = 1, .shape_fn = YGradShape});
// (logits[N,C] float32, labels[N] int32) -> (loss[N], backprop[N,C]), as in
// TensorFlow; a label outside [0, C) fails the step.
WEFT_REGISTER_OP(OpDef{.name = "SparseSoftmaxCrossEntropyWithLogits",
                       .num_inputs = 2,
                       .num_outputs = 2,
                       .shape_fn = XentShape,
                       .grad_fn = XentGrad});
// (x[N,H,W,Cin], filter[KH,KW,Cin,Cout]) -> [N,Ho,Wo,Cout]; attrs stride, padding.
WEFT_REGISTER_OP(
    OpDef{.name = "Conv2D", .num_inputs = 2, .num_outputs = 1, .shape_fn = Conv2DShape, .grad_fn = Conv2DGrad});
// (x, filter, g) -> dx; x is read only for its shape.
WEFT_REGISTER_OP(
    OpDef{.name = "Conv2DBackpropInput", .num_inputs = 3, .num_outputs = 1, .shape_fn = ConvBackpropInputShape});
// (x, filter, g) -> dfilter; filter is read only for its shape.
WEFT_REGISTER_OP(
    OpDef{.name = "Conv2DBackpropFilter", .num_inputs = 3, .num_outputs = 1, .shape_fn = ConvBackpropFilterShape});
// x[N,H,W,C] -> [N,Ho,Wo,C]; attrs ksize, stride (default ksize), padding (default VALID).
WEFT_REGISTER_OP(
    OpDef{.name = "MaxPool", .num_inputs = 1, .num_outputs = 1, .shape_fn = PoolShape, .grad_fn = MaxPoolGradFn});
// (x, y, g) -> dx: each g goes to its window's first maximum.
WEFT_REGISTER_OP(OpDef{.name = "MaxPoolGrad", .num_inputs = 3, .num_outputs = 1, .shape_fn = MaxPoolGradShape});
// x -> (y = x * mask, mask), mask = keep ? 1/(1-rate) : 0; attrs rate, seed.
// The mask depends on (seed, node name, step id): steps differ, reruns of a
// step agree.
WEFT_REGISTER_OP(OpDef{.name = "Dropout",
                       .num_inputs = 1,
                       .num_outputs = 2,
                       .stateful = true,
                       .shape_fn = DropoutShape,
                       .grad_fn = DropoutGrad});

}  // namespace weft
