// Evaluation metrics.
//
// InTopK(logits[N, C] float32, labels[N] int32) -> count (float32 scalar)
//     The number of rows whose label is among the row's k largest logits:
//     row i counts when fewer than k of its logits are strictly greater
//     than logits[i, labels[i]] (ties count in the label's favour, as in
//     TensorFlow's in_top_k), and a non-finite logits[i, labels[i]] never
//     counts. Attr k (int, >= 1); k >= C counts every row with a finite
//     label logit. A label outside [0, C) is an error on the CPU; the GPU,
//     which cannot read labels on the host without waiting for the device,
//     counts such a row as a miss. No gradient (an evaluation output).
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "graph/ops/shape_util.h"

namespace weft {
namespace {

using shape_util::ExpectFloat;
using shape_util::ExpectRank;
using shape_util::ExpectType;
using shape_util::MergeDim;

absl::Status InTopKShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(int64_t k, GetIntAttr(c->node, "k"));
  if (k < 1) return c->Error(absl::StrCat("k must be at least 1, got ", k));
  RETURN_IF_ERROR(ExpectFloat(c, 0, "logits"));
  RETURN_IF_ERROR(ExpectType(c, 1, DType::kInt32, "labels"));
  RETURN_IF_ERROR(ExpectRank(c, 0, 2, "logits"));
  RETURN_IF_ERROR(ExpectRank(c, 1, 1, "labels"));
  const TensorShape& logits = c->input_shapes[0];
  if (!MergeDim(logits.dim(0), c->input_shapes[1].dim(0)).ok()) {
    return c->Error(absl::StrCat("labels ", c->input_shapes[1].DebugString(), " need one entry per row of logits ",
                                 logits.DebugString()));
  }
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0].Clear();  // a scalar
  return absl::OkStatus();
}

}  // namespace

WEFT_REGISTER_OP(OpDef{.name = "InTopK", .num_inputs = 2, .num_outputs = 1, .shape_fn = InTopKShape});

}  // namespace weft
