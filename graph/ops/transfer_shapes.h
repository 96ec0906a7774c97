// The output shapes of an UnpackTensors node (graph/ops/transfer_ops.cc),
// shared by its shape function and its kernels.
#ifndef WEFT_GRAPH_OPS_TRANSFER_SHAPES_H_
#define WEFT_GRAPH_OPS_TRANSFER_SHAPES_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "proto/graph.pb.h"

namespace weft {

// Decodes attrs `ranks` and `dims`; INVALID_ARGUMENT naming the node when they
// disagree, a dim is unknown or negative, or a shape is absurdly large.
absl::StatusOr<std::vector<TensorShape>> UnpackedShapes(const NodeDef& node);

}  // namespace weft

#endif  // WEFT_GRAPH_OPS_TRANSFER_SHAPES_H_
