// Multi-head scaled dot-product attention, fused: the heads' projections are
// the caller's (MatMuls), this op is what sits between them. q, k and v are
// float32 [batch, seq, H * dh], head h owning columns [h dh, (h + 1) dh) of
// the last axis, as Keras's MultiHeadAttention lays its heads out.
//
// Attention(q, k, v) -> (out, probs)
//     Per example and head, with q_h, k_h, v_h its [seq, dh] slices:
//     probs_h = softmax(q_h k_h^T / sqrt(dh)) over each row (the keys), with
//     the scores above the diagonal -inf when `causal` (query i attends to
//     keys 0..i: a language model's mask), and out_h = probs_h v_h, written
//     back to head h's columns. out is [batch, seq, H * dh] and probs
//     [batch, H, seq, seq] (kept for the backward pass; 0 where masked).
//     Attrs: num_heads (H >= 1, dividing the last axis; default 1), causal
//     (default false). Gradients flow from out only.
// AttentionGrad(dout, q, k, v, probs) -> (dq, dk, dv)
//     With P = probs_h, dO = dout_h and s = 1 / sqrt(dh): dv_h = P^T dO,
//     dP = dO v_h^T, dS = P (dP - rowsum(P dP)) elementwise, dq_h = s dS k_h,
//     dk_h = s dS^T q_h. The mask needs no attribute here: masked entries of
//     P are 0, so their dS is 0. Attr num_heads.
#include <cstdint>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops/shape_util.h"

namespace weft {
namespace {

using shape_util::ExpectFloat;
using shape_util::ExpectRank;
using shape_util::MergeDim;

constexpr char kQkvRole[] = " (batch, seq, heads * head_dim)";

absl::StatusOr<int64_t> NumHeads(InferenceContext* c) {
  ASSIGN_OR_RETURN(int64_t heads, GetIntAttrOr(c->node, "num_heads", 1));
  if (heads < 1) return c->Error(absl::StrCat("num_heads must be >= 1, got ", heads));
  ASSIGN_OR_RETURN(bool causal, GetBoolAttrOr(c->node, "causal", false));
  (void)causal;  // read so that a mistyped attr is refused here
  return heads;
}

// Inputs `first`.. (named `roles`) are float32 of rank 3 and one shape, whose
// last axis (when known) is non-empty and divisible by `heads`. Returns the
// merged shape.
absl::StatusOr<TensorShape> MergeHeads(InferenceContext* c, int first, std::initializer_list<const char*> roles,
                                       int64_t heads) {
  TensorShape merged;
  int i = first;
  const char* first_role = *roles.begin();
  for (const char* role : roles) {
    RETURN_IF_ERROR(ExpectFloat(c, i, role));
    RETURN_IF_ERROR(ExpectRank(c, i, 3, absl::StrCat(role, kQkvRole)));
    if (i == first) {
      merged = c->input_shapes[i];
    } else {
      auto m = MergeShapes(merged, c->input_shapes[i]);
      if (!m.ok()) {
        return c->Error(absl::StrCat(role, " ", c->input_shapes[i].DebugString(), " must have ", first_role,
                                     "'s shape ", merged.DebugString()));
      }
      merged = *m;
    }
    ++i;
  }
  const int64_t width = merged.dim(2);
  if (width == 0) return c->Error(absl::StrCat(first_role, " ", merged.DebugString(), " has an empty last axis"));
  if (width > 0 && width % heads != 0) {
    return c->Error(absl::StrCat("num_heads ", heads, " does not divide the last axis of ", first_role, " ",
                                 merged.DebugString(), " (heads * head_dim)"));
  }
  return merged;
}

// [batch, heads, seq, seq], -1 where unknown; refuses a size past 64 bits.
absl::StatusOr<TensorShape> ProbsShape(InferenceContext* c, const TensorShape& qkv, int64_t heads) {
  TensorShape probs{qkv.dim(0), heads, qkv.dim(1), qkv.dim(1)};
  if (probs.IsFullyDefined() && !CheckedNumElements(probs.dims(), "probs").ok()) {
    return c->Error(absl::StrCat("probs ", probs.DebugString(), " has more elements than 64 bits count"));
  }
  return probs;
}

absl::Status AttentionShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(int64_t heads, NumHeads(c));
  ASSIGN_OR_RETURN(TensorShape qkv, MergeHeads(c, 0, {"q", "k", "v"}, heads));
  ASSIGN_OR_RETURN(TensorShape probs, ProbsShape(c, qkv, heads));
  c->output_types = {DType::kFloat32, DType::kFloat32};
  c->output_shapes = {qkv, probs};
  return absl::OkStatus();
}

absl::Status AttentionGradShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(int64_t heads, NumHeads(c));
  ASSIGN_OR_RETURN(TensorShape qkv, MergeHeads(c, 0, {"dout", "q", "k", "v"}, heads));
  ASSIGN_OR_RETURN(TensorShape want, ProbsShape(c, qkv, heads));
  RETURN_IF_ERROR(ExpectFloat(c, 4, "probs"));
  RETURN_IF_ERROR(ExpectRank(c, 4, 4, "probs (batch, heads, seq, seq)"));
  const TensorShape& probs = c->input_shapes[4];
  for (int d = 0; d < 4; ++d) {
    if (!MergeDim(want.dim(d), probs.dim(d)).ok()) {
      return c->Error(absl::StrCat("probs ", probs.DebugString(), " must be ", want.DebugString(),
                                   " (batch, num_heads, seq, seq) for q ", qkv.DebugString()));
    }
  }
  c->output_types = {DType::kFloat32, DType::kFloat32, DType::kFloat32};
  c->output_shapes = {qkv, qkv, qkv};
  return absl::OkStatus();
}

absl::Status AttentionGradFn(GradContext* c) {
  if (c->grad_outputs[1].valid()) {
    return absl::UnimplementedError("no gradient flows through Attention's probs (output 1); use output 0");
  }
  ASSIGN_OR_RETURN(int64_t heads, GetIntAttrOr(c->node->def(), "num_heads", 1));
  Node* g = c->builder->AddNode(
      "AttentionGrad", {c->grad_outputs[0], c->inputs[0], c->inputs[1], c->inputs[2], c->outputs[1]},
      {Attr("num_heads", heads)});
  if (g == nullptr) return c->builder->status();
  c->grad_inputs = {Output(g, 0), Output(g, 1), Output(g, 2)};
  return absl::OkStatus();
}

}  // namespace

WEFT_REGISTER_OP(OpDef{
    .name = "Attention", .num_inputs = 3, .num_outputs = 2, .shape_fn = AttentionShape, .grad_fn = AttentionGradFn});
WEFT_REGISTER_OP(OpDef{.name = "AttentionGrad", .num_inputs = 5, .num_outputs = 3, .shape_fn = AttentionGradShape});

}  // namespace weft
