// Concat (+Grad): tensors joined along their last axis (Keras's
// Concatenate(axis=-1)), e.g. the channels of an inception block's branches.
// Every input has one rank and agrees with the others on every other axis.
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops/shape_util.h"

namespace weft {
namespace {

using shape_util::ExpectFloat;
using shape_util::MergeDim;

// The shape of the inputs [first, first + count) joined along the last axis.
absl::StatusOr<TensorShape> JoinedShape(InferenceContext* c, int first, int count) {
  const TensorShape& s0 = c->input_shapes[first];
  if (s0.rank() < 1) return c->Error(absl::StrCat("input 0 must have rank >= 1, got ", s0.DebugString()));
  std::vector<int64_t> dims(s0.dims().begin(), s0.dims().end());
  const int last = s0.rank() - 1;
  for (int k = 0; k < count; ++k) {
    RETURN_IF_ERROR(ExpectFloat(c, first + k, absl::StrCat("input ", k)));
    const TensorShape& s = c->input_shapes[first + k];
    if (s.rank() != s0.rank()) {
      return c->Error(absl::StrCat("input ", k, " ", s.DebugString(), " must have the rank of input 0 ",
                                   s0.DebugString()));
    }
    for (int d = 0; d < last; ++d) {
      auto m = MergeDim(dims[d], s.dim(d));
      if (!m.ok()) {
        return c->Error(absl::StrCat("input ", k, " ", s.DebugString(), " differs from input 0 ", s0.DebugString(),
                                     " in dim ", d, "; only the last axis may differ"));
      }
      dims[d] = *m;
    }
    if (k == 0) continue;
    if (dims[last] < 0 || s.dim(last) < 0) {
      dims[last] = -1;
    } else if (!CheckedAdd(dims[last], s.dim(last), &dims[last])) {
      return c->Error(absl::StrCat("the joined last axis overflows 64 bits at input ", k));
    }
  }
  return TensorShape(dims);
}

absl::Status ConcatShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(c->output_shapes[0], JoinedShape(c, 0, static_cast<int>(c->input_shapes.size())));
  c->output_types[0] = DType::kFloat32;
  return absl::OkStatus();
}

// (g, x_1..x_n) -> (dx_1..dx_n); attr num_split = n.
absl::Status ConcatGradShape(InferenceContext* c) {
  const int n = static_cast<int>(c->output_shapes.size());
  if (static_cast<int>(c->input_shapes.size()) != n + 1) {
    return c->Error(absl::StrCat("takes the gradient and num_split = ", n, " inputs, got ",
                                 c->input_shapes.size(), " inputs"));
  }
  ASSIGN_OR_RETURN(TensorShape y, JoinedShape(c, 1, n));
  RETURN_IF_ERROR(ExpectFloat(c, 0, "gradient"));
  if (!MergeShapes(y, c->input_shapes[0]).ok()) {
    return c->Error(absl::StrCat("gradient ", c->input_shapes[0].DebugString(),
                                 " does not match the concatenation ", y.DebugString()));
  }
  for (int k = 0; k < n; ++k) {
    c->output_types[k] = DType::kFloat32;
    c->output_shapes[k] = c->input_shapes[k + 1];
  }
  return absl::OkStatus();
}

absl::Status ConcatGradFn(GradContext* c) {
  std::vector<Output> in = {c->grad_outputs[0]};
  in.insert(in.end(), c->inputs.begin(), c->inputs.end());
  Node* g = c->builder->AddNode("ConcatGrad", in, {Attr("num_split", static_cast<int64_t>(c->inputs.size()))});
  if (g == nullptr) return c->builder->status();
  for (size_t k = 0; k < c->inputs.size(); ++k) c->grad_inputs[k] = Output(g, static_cast<int>(k));
  return absl::OkStatus();
}

}  // namespace

// (x_1, ..., x_n) -> y, the inputs joined along the last axis in order.
WEFT_REGISTER_OP(
    OpDef{.name = "Concat", .num_inputs = -1, .num_outputs = 1, .shape_fn = ConcatShape, .grad_fn = ConcatGradFn});
// (g, x_1, ..., x_n) -> (dx_1, ..., dx_n): g's last axis cut into the
// inputs' widths; the x_i are read only for their shapes.
WEFT_REGISTER_OP(OpDef{.name = "ConcatGrad",
                       .num_inputs = -1,
                       .num_outputs_attr = "num_split",
                       .shape_fn = ConcatGradShape});

}  // namespace weft
