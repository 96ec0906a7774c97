// The shapes of a Variable node (graph/ops/state_ops.cc): attr `shape`, and
// for a row shard of a larger variable attrs `init_shape` (the whole
// variable's shape, whose initial values the shard draws) and `row_offset`
// (the shard's first row in it). Shared by the shape function and the
// kernels so that both refuse the same attributes: the kernel may see a graph
// whose inference was skipped.
#ifndef WEFT_GRAPH_OPS_VARIABLE_SHAPES_H_
#define WEFT_GRAPH_OPS_VARIABLE_SHAPES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "proto/graph.pb.h"

namespace weft {

struct VariableShapes {
  TensorShape shape;
  TensorShape init_shape;  // == shape for a variable that is not a shard
  int64_t row_offset = 0;
  int64_t num_elements = 0;       // of shape
  int64_t init_num_elements = 0;  // of init_shape
};

// Decodes and checks the attrs: INVALID_ARGUMENT naming the attribute when a
// shape is not fully defined or its element count overflows, when
// init_shape's rank or trailing dims differ from shape's, or when rows
// [row_offset, row_offset + shape[0]) do not lie inside init_shape[0].
absl::StatusOr<VariableShapes> GetVariableShapes(const NodeDef& node);

}  // namespace weft

#endif  // WEFT_GRAPH_OPS_VARIABLE_SHAPES_H_
