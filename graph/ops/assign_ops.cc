// Ops that overwrite a variable with a value the step computed or was fed:
//
// Assign(var, value)       var = value      (any dtype; value has var's dtype and shape)
// AssignAdd(var, value)    var += value     (float32, or int64: a step counter)
//
// Like the optimizer updates (training_ops.cc), each writes into input 0's
// buffer, which is the variable's own, and forwards `var` as output 0, so a
// step that fetches it sees the new value. The remote-session API uses them
// (`weft.ops.assign` in the Python client): one session assigns a variable
// that lives in a container, and another session reads it.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/op_registry.h"

namespace weft {
namespace {

absl::Status AssignShape(InferenceContext* c, bool additive) {
  const DType var = c->input_types[0];
  if (c->input_types[1] != var) {
    return c->Error(absl::StrCat("value is ", DTypeName(c->input_types[1]), ", the variable is ", DTypeName(var)));
  }
  if (additive && var != DType::kFloat32 && var != DType::kInt64) {
    return c->Error(absl::StrCat("the variable must be float32 or int64, got ", DTypeName(var)));
  }
  if (!c->input_shapes[1].IsCompatibleWith(c->input_shapes[0])) {
    return c->Error(absl::StrCat("value ", c->input_shapes[1].DebugString(), " does not have the variable's shape ",
                                 c->input_shapes[0].DebugString()));
  }
  c->output_types[0] = var;
  c->output_shapes[0] = c->input_shapes[0];
  return absl::OkStatus();
}

}  // namespace

WEFT_REGISTER_OP(OpDef{.name = "Assign",
                       .num_inputs = 2,
                       .num_outputs = 1,
                       .stateful = true,
                       .shape_fn = [](InferenceContext* c) { return AssignShape(c, /*additive=*/false); }});
WEFT_REGISTER_OP(OpDef{.name = "AssignAdd",
                       .num_inputs = 2,
                       .num_outputs = 1,
                       .stateful = true,
                       .shape_fn = [](InferenceContext* c) { return AssignShape(c, /*additive=*/true); }});

}  // namespace weft
