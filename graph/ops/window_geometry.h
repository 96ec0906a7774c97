// Output size and padding of a sliding window (convolution, pooling) along
// one spatial dimension, shared by the shape functions and the kernels so the
// two can never disagree.
//
// "VALID": the window stays inside the input; out = (in - k) / stride + 1.
// "SAME":  out = ceil(in / stride); the input is padded by
//          max((out - 1) * stride + k - in, 0), the smaller half before
//          (TensorFlow's convention), so pad_after is pad_before or
//          pad_before + 1.
#ifndef WEFT_GRAPH_OPS_WINDOW_GEOMETRY_H_
#define WEFT_GRAPH_OPS_WINDOW_GEOMETRY_H_

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "graph/attr.h"

namespace weft {

enum class Padding { kValid, kSame };

inline absl::StatusOr<Padding> ParsePadding(const std::string& s) {
  if (s == "VALID") return Padding::kValid;
  if (s == "SAME") return Padding::kSame;
  return absl::InvalidArgumentError(absl::StrCat("padding must be \"SAME\" or \"VALID\", got \"", s, "\""));
}

struct WindowDim {
  int64_t out = -1;        // -1 when the input size is unknown
  int64_t pad_before = 0;  // 0 when unknown
  int64_t pad_after = 0;   // 0 when unknown
};

// REQUIRES: k >= 1, stride >= 1. `in` may be -1 (unknown at graph-build time).
inline absl::StatusOr<WindowDim> ComputeWindow(int64_t in, int64_t k, int64_t stride, Padding padding,
                                               absl::string_view dim_name) {
  WindowDim w;
  if (in < 0) return w;
  if (padding == Padding::kValid) {
    if (in < k) {
      return absl::InvalidArgumentError(
          absl::StrCat(dim_name, " ", in, " is smaller than the window size ", k, " with VALID padding"));
    }
    w.out = (in - k) / stride + 1;
    return w;
  }
  // ceil(in / stride) without in + stride - 1, which can overflow; then
  // (out - 1) * stride < in, so only adding k can.
  w.out = in / stride + (in % stride != 0 ? 1 : 0);
  int64_t span;
  if (!CheckedAdd(w.out > 0 ? (w.out - 1) * stride : int64_t{0}, k, &span)) {
    return absl::InvalidArgumentError(
        absl::StrCat(dim_name, " ", in, ": the window size ", k, " overflows 64 bits with SAME padding"));
  }
  const int64_t pad_total = std::max<int64_t>(span - in, 0);
  w.pad_before = pad_total / 2;
  w.pad_after = pad_total - w.pad_before;
  return w;
}

// Attributes of Conv2D and its backprops: stride (int, default 1), padding
// ("SAME" | "VALID", default "VALID").
struct ConvParams {
  int64_t stride = 1;
  Padding padding = Padding::kValid;
};
inline absl::StatusOr<ConvParams> GetConvParams(const NodeDef& node) {
  ConvParams p;
  ASSIGN_OR_RETURN(p.stride, GetIntAttrOr(node, "stride", 1));
  if (p.stride < 1) return absl::InvalidArgumentError(absl::StrCat("stride must be >= 1, got ", p.stride));
  ASSIGN_OR_RETURN(std::string padding, GetStringAttrOr(node, "padding", "VALID"));
  ASSIGN_OR_RETURN(p.padding, ParsePadding(padding));
  return p;
}

// Attributes of MaxPool(Grad): ksize (int), stride (int, default ksize),
// padding ("SAME" | "VALID", default "VALID").
struct PoolParams {
  int64_t ksize = 1;
  int64_t stride = 1;
  Padding padding = Padding::kValid;
};
inline absl::StatusOr<PoolParams> GetPoolParams(const NodeDef& node) {
  PoolParams p;
  ASSIGN_OR_RETURN(p.ksize, GetIntAttr(node, "ksize"));
  if (p.ksize < 1) return absl::InvalidArgumentError(absl::StrCat("ksize must be >= 1, got ", p.ksize));
  ASSIGN_OR_RETURN(p.stride, GetIntAttrOr(node, "stride", p.ksize));
  if (p.stride < 1) return absl::InvalidArgumentError(absl::StrCat("stride must be >= 1, got ", p.stride));
  ASSIGN_OR_RETURN(std::string padding, GetStringAttrOr(node, "padding", "VALID"));
  ASSIGN_OR_RETURN(p.padding, ParsePadding(padding));
  return p;
}

struct InferenceContext;  // graph/op_registry.h

// A 2-D pooling's output shape, x [N,H,W,C] (input 0) -> [N,Ho,Wo,C] under
// the node's ksize, stride and padding; PoolShape sets it as output 0,
// float32. MaxPool's and AvgPool's shape inference (graph/ops/nn_ops.cc).
absl::StatusOr<TensorShape> PoolOutputShape(InferenceContext* c);
absl::Status PoolShape(InferenceContext* c);

}  // namespace weft

#endif  // WEFT_GRAPH_OPS_WINDOW_GEOMETRY_H_
