// Ops that feed, hold or pass values: Placeholder, Const, Variable, Identity,
// NoOp.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops/variable_shapes.h"

namespace weft {
namespace {

absl::Status PlaceholderShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(c->output_types[0], GetTypeAttr(c->node, "dtype"));
  ASSIGN_OR_RETURN(c->output_shapes[0], GetShapeAttr(c->node, "shape"));
  return absl::OkStatus();
}

absl::Status ConstShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(Tensor t, GetTensorAttr(c->node, "value"));
  c->output_types[0] = t.dtype();
  c->output_shapes[0] = t.shape();
  return absl::OkStatus();
}

absl::Status VariableShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(c->output_types[0], GetTypeAttr(c->node, "dtype"));
  ASSIGN_OR_RETURN(VariableShapes shapes, GetVariableShapes(c->node));
  c->output_shapes[0] = shapes.shape;
  ASSIGN_OR_RETURN(std::string init, GetStringAttrOr(c->node, "initializer", "zeros"));
  if (init != "zeros" && init != "ones" && init != "constant" && init != "glorot_uniform" && init != "he_normal" &&
      init != "orthogonal" && init != "unit_forget_bias") {
    return c->Error(absl::StrCat("unknown initializer '", init,
                                 "' (expected zeros, ones, constant, glorot_uniform, he_normal, orthogonal or "
                                 "unit_forget_bias)"));
  }
  const TensorShape& s = shapes.shape;
  if (init == "orthogonal" && s.rank() != 2) {
    return c->Error(absl::StrCat("initializer orthogonal needs a matrix, got ", s.DebugString()));
  }
  if (init == "unit_forget_bias" && (s.rank() != 1 || s.dim(0) < 0 || s.dim(0) % 4 != 0)) {
    return c->Error(absl::StrCat("initializer unit_forget_bias needs an LSTM's [4 units] bias, got ",
                                 s.DebugString()));
  }
  // A string when given; the master checks a session's names (master/containers.h).
  RETURN_IF_ERROR(GetStringAttrOr(c->node, "container", "").status());
  return absl::OkStatus();
}

absl::Status NoShape(InferenceContext*) { return absl::OkStatus(); }

absl::Status IdentityGrad(GradContext* c) {
  c->grad_inputs[0] = c->grad_outputs[0];
  return absl::OkStatus();
}

}  // namespace

// Fed by the caller each step; running one unfed is an error.
WEFT_REGISTER_OP(OpDef{.name = "Placeholder", .num_inputs = 0, .num_outputs = 1, .shape_fn = PlaceholderShape});
WEFT_REGISTER_OP(OpDef{.name = "Const", .num_inputs = 0, .num_outputs = 1, .shape_fn = ConstShape});
// Outputs the variable's value, sharing its buffer; update ops write through it.
// Attrs: dtype, shape, initializer, seed, init_value; optional shared_name
// (the variable's name in its task, default the node's) and init_name (the
// name its random initial values are drawn for, default shared_name); for a
// row shard, init_shape and row_offset (graph/ops/variable_shapes.h); and
// container (default empty: the variable belongs to its session; otherwise
// it lives in the task's store of that container, shared by every session
// naming it there, and outlives them: runtime/resource_mgr.h).
WEFT_REGISTER_OP(
    OpDef{.name = "Variable", .num_inputs = 0, .num_outputs = 1, .stateful = true, .shape_fn = VariableShape});
WEFT_REGISTER_OP(OpDef{
    .name = "Identity", .num_inputs = 1, .num_outputs = 1, .shape_fn = UnchangedShape, .grad_fn = IdentityGrad});
// No outputs: a target that groups control inputs.
WEFT_REGISTER_OP(OpDef{.name = "NoOp", .num_inputs = 0, .num_outputs = 0, .shape_fn = NoShape});

}  // namespace weft
