// Gradient clipping by global norm.
//
// GlobalNormScale(g_1, ..., g_n) -> (scale, norm)
//     norm = sqrt(sum over every element of every g_i of its square),
//     summed in double; scale = clip_norm / max(norm, clip_norm), so
//     g_i * scale has a global norm of at most clip_norm (scale is 1 when
//     the norm is within it). Both float32 scalars. Attr clip_norm (float,
//     positive). A non-finite norm gives a NaN scale, so a step whose
//     gradients overflowed poisons its update visibly instead of
//     silently applying a zero step. No gradient (it runs after autodiff).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "graph/ops/shape_util.h"

namespace weft {
namespace {

absl::Status GlobalNormScaleShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(float clip, GetFloatAttr(c->node, "clip_norm"));
  if (!(clip > 0.0f) || !std::isfinite(clip)) {
    return c->Error(absl::StrCat("clip_norm must be a positive number, got ", clip));
  }
  for (size_t i = 0; i < c->input_types.size(); ++i) {
    RETURN_IF_ERROR(shape_util::ExpectFloat(c, static_cast<int>(i), absl::StrCat("gradient ", i)));
  }
  for (int o = 0; o < 2; ++o) {
    c->output_types[o] = DType::kFloat32;
    c->output_shapes[o].Clear();  // a scalar
  }
  return absl::OkStatus();
}

}  // namespace

WEFT_REGISTER_OP(
    OpDef{.name = "GlobalNormScale", .num_inputs = -1, .num_outputs = 2, .shape_fn = GlobalNormScaleShape});

}  // namespace weft
