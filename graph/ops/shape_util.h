// Checks shared by the shape functions in graph/ops/*_ops.cc. Each names the
// offending input by its role ("logits", "filter") so that, with the node
// name and op the graph adds, the message says what to change.
#ifndef WEFT_GRAPH_OPS_SHAPE_UTIL_H_
#define WEFT_GRAPH_OPS_SHAPE_UTIL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/checked_math.h"
#include "graph/op_registry.h"

namespace weft {
namespace shape_util {

inline absl::Status ExpectType(InferenceContext* c, int i, DType want, absl::string_view role) {
  if (c->input_types[i] != want) {
    return c->Error(absl::StrCat(role, " must be ", DTypeName(want), ", got ", DTypeName(c->input_types[i])));
  }
  return absl::OkStatus();
}

inline absl::Status ExpectFloat(InferenceContext* c, int i, absl::string_view role) {
  return ExpectType(c, i, DType::kFloat32, role);
}

inline absl::Status ExpectRank(InferenceContext* c, int i, int rank, absl::string_view role) {
  if (c->input_shapes[i].rank() != rank) {
    return c->Error(absl::StrCat(role, " must have rank ", rank, ", got shape ", c->input_shapes[i].DebugString()));
  }
  return absl::OkStatus();
}

inline absl::Status ExpectMinRank(InferenceContext* c, int i, int rank, absl::string_view role) {
  if (c->input_shapes[i].rank() < rank) {
    return c->Error(
        absl::StrCat(role, " must have rank >= ", rank, ", got shape ", c->input_shapes[i].DebugString()));
  }
  return absl::OkStatus();
}

// The merge of two possibly-unknown dims; -1 when both are unknown.
inline absl::StatusOr<int64_t> MergeDim(int64_t a, int64_t b) {
  if (a < 0) return b;
  if (b < 0 || a == b) return a;
  return absl::InvalidArgumentError("dims differ");
}

// Merges the shapes of inputs i and j, which must agree.
inline absl::StatusOr<TensorShape> MergeInputs(InferenceContext* c, int i, int j, absl::string_view role_i,
                                               absl::string_view role_j) {
  auto merged = MergeShapes(c->input_shapes[i], c->input_shapes[j]);
  if (!merged.ok()) {
    return c->Error(absl::StrCat(role_i, " ", c->input_shapes[i].DebugString(), " and ", role_j, " ",
                                 c->input_shapes[j].DebugString(), " must have the same shape"));
  }
  return merged;
}

// Reshape's attr `shape`: dims >= 0 and at most one -1 (the dim inferred from
// the input's size). `known` is the product of the other dims, checked for
// overflow; `unknown` the -1's index or -1. Shared by the shape function and
// the kernel.
struct ReshapeTarget {
  std::vector<int64_t> dims;
  int unknown = -1;
  int64_t known = 1;
};
inline absl::StatusOr<ReshapeTarget> ParseReshapeTarget(std::vector<int64_t> dims) {
  ReshapeTarget t;
  t.dims = std::move(dims);
  const std::string where = absl::StrCat("attribute 'shape' [", absl::StrJoin(t.dims, ","), "]");
  for (int i = 0; i < static_cast<int>(t.dims.size()); ++i) {
    if (t.dims[i] == -1) {
      if (t.unknown >= 0) return absl::InvalidArgumentError(absl::StrCat(where, " has more than one -1"));
      t.unknown = i;
    } else if (t.dims[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has a negative dimension at index ", i));
    } else if (!CheckedMul(t.known, t.dims[i], &t.known)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the number of elements overflows 64 bits at dimension ", i));
    }
  }
  return t;
}

}  // namespace shape_util
}  // namespace weft

#endif  // WEFT_GRAPH_OPS_SHAPE_UTIL_H_
