// ModelLowering's multi_head_attention layer: Keras's MultiHeadAttention
// with query = value = key (self-attention), on [batch, seq, D].
//
// Each projection (query, key, value: D -> num_heads * key_dim; the
// attention output: num_heads * key_dim -> D) is a MatMul and a BiasAdd on
// the positions as rows ([batch * seq, features]), reshaped back to a
// sequence around the fused Attention op (graph/ops/attention_ops.cc),
// which keeps the heads side by side on the last axis. The variables are
// <layer>/query/kernel, /query/bias, /key/..., /value/... and
// /attention_output/kernel and /bias (Keras's names; kernels glorot_uniform,
// biases zeros), created by the training pass and reused by evaluation. The
// layer has no dropout and no state: both passes compute the same thing.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "graph/attr.h"
#include "graph/model_lowering.h"

namespace weft {
namespace {

Output ReshapeTo(GraphBuilder* b, Output x, std::vector<int64_t> shape) {
  return b->Op("Reshape", {x}, {Attr("shape", std::move(shape))});
}

// rows [n, in] -> [n, out] through kernel and bias.
Output Project(GraphBuilder* b, Output rows, Output kernel, Output bias) {
  return b->Op("BiasAdd", {b->Op("MatMul", {rows, kernel}), bias});
}

}  // namespace

absl::Status ModelLowering::MultiHeadAttention(int i, Output* x) {
  const MultiHeadAttentionLayer& a = model_.layer(i).multi_head_attention();
  const TensorShape in = x->shape();
  if (in.rank() != 3 || in.dim(1) <= 0 || in.dim(2) <= 0) {
    return Error(i, absl::StrCat("multi_head_attention needs a sequence input [batch, seq, features] of known seq ",
                                 "and features, got ", in.DebugString()));
  }
  const int64_t heads = a.num_heads(), seq = in.dim(1), features = in.dim(2);
  if (heads < 1) return Error(i, absl::StrCat("multi_head_attention.num_heads must be >= 1, got ", heads));
  if (a.key_dim() < 0) return Error(i, absl::StrCat("multi_head_attention.key_dim must be >= 0, got ", a.key_dim()));
  if (a.key_dim() == 0 && features % heads != 0) {
    return Error(i, absl::StrCat("multi_head_attention.num_heads ", heads, " does not divide the input's ", features,
                                 " features; set key_dim"));
  }
  const int64_t key_dim = a.key_dim() > 0 ? a.key_dim() : features / heads;
  int64_t width = 0;
  if (!CheckedMul(heads, key_dim, &width)) {
    return Error(i, absl::StrCat("multi_head_attention: num_heads * key_dim overflows 64 bits"));
  }
  LayerVars& v = vars_[i];
  if (!v.kernel.valid()) {
    // One seed per projection, so that query and key start apart.
    const int64_t seed = (job_.seed() + i) * 4;
    auto add = [&](const char* scope, int64_t n_in, int64_t n_out, int64_t k, Output* kernel, Output* bias) {
      NameScope ns(b_, scope);
      *kernel = b_->Variable("kernel", DType::kFloat32, {n_in, n_out}, "glorot_uniform", seed + k);
      *bias = b_->Variable("bias", DType::kFloat32, {n_out}, "zeros");
      Track(*kernel);
      Track(*bias);
    };
    add("query", features, width, 0, &v.query_kernel, &v.query_bias);
    add("key", features, width, 1, &v.key_kernel, &v.key_bias);
    add("value", features, width, 2, &v.value_kernel, &v.value_bias);
    add("attention_output", width, features, 3, &v.kernel, &v.bias);
    if (!b_->status().ok()) return b_->status();
  }
  const Output rows = ReshapeTo(b_, *x, {-1, features});
  const std::vector<int64_t> heads_shape{-1, seq, width};
  const Output q = ReshapeTo(b_, Project(b_, rows, v.query_kernel, v.query_bias), heads_shape);
  const Output k = ReshapeTo(b_, Project(b_, rows, v.key_kernel, v.key_bias), heads_shape);
  const Output val = ReshapeTo(b_, Project(b_, rows, v.value_kernel, v.value_bias), heads_shape);
  Node* attn = b_->AddNode("Attention", {q, k, val}, {Attr("num_heads", heads), Attr("causal", a.causal())});
  if (attn == nullptr) return b_->status();
  const Output out = Project(b_, ReshapeTo(b_, Output(attn, 0), {-1, width}), v.kernel, v.bias);
  *x = ReshapeTo(b_, out, {-1, seq, features});
  return absl::OkStatus();
}

}  // namespace weft
