// AvgPool (+Grad): the mean of each 2-D window of an NHWC image, with the
// attributes of MaxPool (graph/ops/window_geometry.h's PoolParams). Under
// SAME padding a window's mean is over its positions inside the image only,
// as in Keras and TensorFlow: padding is never counted.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops/shape_util.h"
#include "graph/ops/window_geometry.h"

namespace weft {
namespace {

using shape_util::ExpectFloat;
using shape_util::ExpectRank;

// (x, g) -> x's shape; g must have the pooling output's shape.
absl::Status AvgPoolGradShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(TensorShape y, PoolOutputShape(c));
  RETURN_IF_ERROR(ExpectFloat(c, 1, "gradient"));
  if (!MergeShapes(y, c->input_shapes[1]).ok()) {
    return c->Error(absl::StrCat("gradient ", c->input_shapes[1].DebugString(),
                                 " does not match the pooling output ", y.DebugString()));
  }
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = c->input_shapes[0];
  return absl::OkStatus();
}

absl::Status AvgPoolGradFn(GradContext* c) {
  const NodeDef& def = c->node->def();
  AttrList attrs;
  for (const char* name : {"ksize", "stride", "padding"}) {
    auto it = def.attr().find(name);
    if (it != def.attr().end()) attrs.emplace_back(name, it->second);
  }
  c->grad_inputs[0] = c->builder->Op("AvgPoolGrad", {c->inputs[0], c->grad_outputs[0]}, attrs);
  return absl::OkStatus();
}

}  // namespace

// x[N,H,W,C] -> [N,Ho,Wo,C]; attrs ksize, stride (default ksize), padding
// (default VALID). Each output is the mean of its window's in-image values.
WEFT_REGISTER_OP(
    OpDef{.name = "AvgPool", .num_inputs = 1, .num_outputs = 1, .shape_fn = PoolShape, .grad_fn = AvgPoolGradFn});
// (x, g) -> dx: each g spread evenly over its window's in-image positions;
// x is read only for its shape.
WEFT_REGISTER_OP(OpDef{.name = "AvgPoolGrad", .num_inputs = 2, .num_outputs = 1, .shape_fn = AvgPoolGradShape});

}  // namespace weft
