// Dynamic loss scaling (MixedPrecision in proto/job.proto). The lowering
// multiplies the loss by the variable `scale` before autodiff, so every
// gradient arrives multiplied by it, and then:
//
// UnscaleGradients(scale, g_1, ..., g_n) -> (u_1, ..., u_n, overflow)
//     u_i = g_i / scale. When any element of any g_i is not finite, the
//     step overflowed: element 0 of every u_i is NaN and `overflow` (a
//     float32 scalar) is NaN, else 0. The updates that apply the u_i carry
//     skip_nonfinite (graph/ops/training_ops.cc) and so skip the whole step
//     together. Under a strategy the NaN survives the replicas' mean (a
//     NaN in any replica's element 0 makes the mean's element 0 NaN), so
//     every replica skips the same steps. No gradient (it runs after
//     autodiff).
//
// ApplyLossScale(scale, good_steps, overflow) -> scale
//     overflow not finite: scale = max(scale / 2, 1), good_steps = 0;
//     else good_steps += 1, and at growth_interval (int attr, positive)
//     scale = 2 scale (when that is finite) and good_steps = 0. `scale`
//     and `good_steps` are float32 scalar variables updated in place; as
//     in the other Apply ops, the last input stands where a gradient
//     would, so the strategies average `overflow` over the replicas as
//     they average gradients and every replica's scale moves alike.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "graph/ops/shape_util.h"

namespace weft {
namespace {

using shape_util::ExpectFloat;
using shape_util::ExpectRank;

absl::Status ExpectScalar(InferenceContext* c, int i, const char* role) {
  RETURN_IF_ERROR(ExpectFloat(c, i, role));
  return ExpectRank(c, i, 0, role);
}

absl::Status UnscaleGradientsShape(InferenceContext* c) {
  const int n = static_cast<int>(c->input_types.size());
  if (n < 2) return c->Error("takes the scale and at least one gradient");
  RETURN_IF_ERROR(ExpectScalar(c, 0, "scale"));
  for (int i = 1; i < n; ++i) {
    RETURN_IF_ERROR(ExpectFloat(c, i, absl::StrCat("gradient ", i - 1)));
    c->output_types[i - 1] = DType::kFloat32;
    c->output_shapes[i - 1] = c->input_shapes[i];
  }
  c->output_types[n - 1] = DType::kFloat32;
  c->output_shapes[n - 1].Clear();
  return absl::OkStatus();
}

absl::Status ApplyLossScaleShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(int64_t interval, GetIntAttr(c->node, "growth_interval"));
  if (interval <= 0) return c->Error(absl::StrCat("growth_interval must be positive, got ", interval));
  RETURN_IF_ERROR(ExpectScalar(c, 0, "scale"));
  RETURN_IF_ERROR(ExpectScalar(c, 1, "good_steps"));
  RETURN_IF_ERROR(ExpectScalar(c, 2, "overflow"));
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0].Clear();
  return absl::OkStatus();
}

}  // namespace

WEFT_REGISTER_OP(OpDef{.name = "UnscaleGradients", .num_inputs = -1, .num_outputs = -1,
                       .shape_fn = UnscaleGradientsShape});
WEFT_REGISTER_OP(OpDef{.name = "ApplyLossScale", .num_inputs = 3, .num_outputs = 1, .stateful = true,
                       .shape_fn = ApplyLossScaleShape});

}  // namespace weft
