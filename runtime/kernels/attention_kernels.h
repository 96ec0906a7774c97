// The attention kernels (graph/ops/attention_ops.cc), written once for every
// device as layer_norm_kernels.h's: each class template reads its op's
// attributes, checks the inputs, allocates the outputs and hands the
// operands to `Impl::Run`, the device's computation
// (cpu/attention_kernels.cc, cuda/gpu_attention_kernels.cc).
//
// q, k and v are float32 [batch, seq, heads * head_dim]; head h is the
// column block [h head_dim, (h + 1) head_dim) of each row, so a head's
// [seq, head_dim] slice is a strided matrix (row stride `width`). probs is
// [batch, heads, seq, seq], one contiguous [seq, seq] matrix per (example,
// head). An empty batch or sequence is fine: the outputs are empty and Run
// is not called.
//
// Thread-safety: kernels are immutable after construction; Compute may run
// concurrently.
#ifndef WEFT_RUNTIME_KERNELS_ATTENTION_KERNELS_H_
#define WEFT_RUNTIME_KERNELS_ATTENTION_KERNELS_H_

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/dtype.h"
#include "common/tensor.h"
#include "graph/attr.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace kernels {

struct AttentionGeometry {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 1;
  int64_t head_dim = 0;
  int64_t width = 0;   // heads * head_dim: a row of q, k, v and out
  float scale = 1.0f;  // 1 / sqrt(head_dim)
  bool causal = false;

  // Offset of head h's first element of example b in q, k, v or out.
  int64_t HeadOffset(int64_t b, int64_t h) const { return b * seq * width + h * head_dim; }
  // Offset of the [seq, seq] matrix of (b, h) in probs.
  int64_t ProbsOffset(int64_t b, int64_t h) const { return (b * heads + h) * seq * seq; }
};

// The attributes num_heads (>= 1; default 1) and causal (default false).
inline absl::Status ReadAttentionAttrs(const NodeDef& def, int64_t* heads, bool* causal) {
  absl::StatusOr<int64_t> h = GetIntAttrOr(def, "num_heads", 1);
  if (!h.ok()) return h.status();
  if (*h < 1) return absl::InvalidArgumentError(absl::StrCat("num_heads must be >= 1, got ", *h));
  absl::StatusOr<bool> c = GetBoolAttrOr(def, "causal", false);
  if (!c.ok()) return c.status();
  *heads = *h;
  *causal = *c;
  return absl::OkStatus();
}

// Inputs (index, role), the first of them q-like: float32, rank 3, one
// shape, a non-empty last axis that `heads` divides, and probs of
// [batch, heads, seq, seq] elements that fit 64 bits.
inline absl::StatusOr<AttentionGeometry> CheckAttentionInputs(
    OpKernelContext* ctx, std::initializer_list<std::pair<int, const char*>> qkv, int64_t heads, bool causal) {
  const auto& [first, first_role] = *qkv.begin();
  const Tensor& q = ctx->input(first);
  for (const auto& [i, role] : qkv) {
    const Tensor& t = ctx->input(i);
    if (absl::Status s = ExpectDType(t, DType::kFloat32, role); !s.ok()) return s;
    if (absl::Status s = ExpectRank(t, 3, absl::StrCat(role, " (batch, seq, heads * head_dim)")); !s.ok()) return s;
    if (i != first && t.shape() != q.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(role, " ", t.shape().DebugString(), " must have ", first_role,
                                                     "'s shape ", q.shape().DebugString()));
    }
  }
  AttentionGeometry g;
  g.batch = q.shape().dim(0);
  g.seq = q.shape().dim(1);
  g.width = q.shape().dim(2);
  g.heads = heads;
  g.causal = causal;
  if (g.width == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(first_role, " ", q.shape().DebugString(), " has an empty last axis"));
  }
  if (g.width % heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_heads ", heads, " does not divide the last axis of ",
                                                   first_role, " ", q.shape().DebugString(), " (heads * head_dim)"));
  }
  g.head_dim = g.width / heads;
  g.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(g.head_dim)));
  if (!CheckedNumElements({g.batch, heads, g.seq, g.seq}, "probs").ok()) {
    return absl::InvalidArgumentError(absl::StrCat("probs for ", first_role, " ", q.shape().DebugString(), " and ",
                                                   heads, " heads has more elements than 64 bits count"));
  }
  return g;
}

inline TensorShape ProbsShape(const AttentionGeometry& g) { return TensorShape{g.batch, g.heads, g.seq, g.seq}; }

// Attention(q, k, v) -> (out, probs).
// Impl::Run(ctx, geometry, q, k, v, out, probs) with batch, seq >= 1.
template <typename Impl>
class AttentionKernel : public OpKernel {
 public:
  explicit AttentionKernel(OpKernelConstruction* c) : OpKernel(c) {
    if (absl::Status s = ReadAttentionAttrs(c->def(), &heads_, &causal_); !s.ok()) c->SetStatus(s);
  }
  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<AttentionGeometry> g = CheckAttentionInputs(ctx, {{0, "q"}, {1, "k"}, {2, "v"}}, heads_, causal_);
    OP_REQUIRES_OK(ctx, g.status());
    const Tensor& q = ctx->input(0);
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, q.shape());
    Tensor* probs = out == nullptr ? nullptr : ctx->allocate_output(1, DType::kFloat32, ProbsShape(*g));
    if (probs == nullptr || g->batch == 0 || g->seq == 0) return;
    Impl::Run(ctx, *g, q, ctx->input(1), ctx->input(2), out, probs);
  }

 private:
  int64_t heads_ = 1;
  bool causal_ = false;
};

// AttentionGrad(dout, q, k, v, probs) -> (dq, dk, dv).
// Impl::Run(ctx, geometry, dout, q, k, v, probs, dq, dk, dv) with batch,
// seq >= 1.
template <typename Impl>
class AttentionGradKernel : public OpKernel {
 public:
  explicit AttentionGradKernel(OpKernelConstruction* c) : OpKernel(c) {
    bool causal = false;  // probs carries the mask
    if (absl::Status s = ReadAttentionAttrs(c->def(), &heads_, &causal); !s.ok()) c->SetStatus(s);
  }
  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<AttentionGeometry> g =
        CheckAttentionInputs(ctx, {{0, "dout"}, {1, "q"}, {2, "k"}, {3, "v"}}, heads_, false);
    OP_REQUIRES_OK(ctx, g.status());
    const Tensor& probs = ctx->input(4);
    OP_REQUIRES_OK(ctx, ExpectDType(probs, DType::kFloat32, "probs"));
    if (probs.shape() != ProbsShape(*g)) {
      OP_REQUIRES_OK(ctx, absl::InvalidArgumentError(absl::StrCat(
                              "probs ", probs.shape().DebugString(), " must be ", ProbsShape(*g).DebugString(),
                              " (batch, num_heads, seq, seq) for q ", ctx->input(1).shape().DebugString())));
    }
    const TensorShape& s = ctx->input(1).shape();
    Tensor* dq = ctx->allocate_output(0, DType::kFloat32, s);
    Tensor* dk = dq == nullptr ? nullptr : ctx->allocate_output(1, DType::kFloat32, s);
    Tensor* dv = dk == nullptr ? nullptr : ctx->allocate_output(2, DType::kFloat32, s);
    if (dv == nullptr || g->batch == 0 || g->seq == 0) return;
    Impl::Run(ctx, *g, ctx->input(0), ctx->input(1), ctx->input(2), ctx->input(3), probs, dq, dk, dv);
  }

 private:
  int64_t heads_ = 1;
};

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_ATTENTION_KERNELS_H_
