// The output shapes of an UnpackTensors node (graph/ops/transfer_ops.cc)
// and the layout of a packed tensor, shared by the shape functions, the
// kernels and the rewrite that inserts them (graph/fuse_transfers.h).
#ifndef WEFT_GRAPH_OPS_TRANSFER_SHAPES_H_
#define WEFT_GRAPH_OPS_TRANSFER_SHAPES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "proto/graph.pb.h"

namespace weft {

// Decodes attrs `ranks` and `dims`; INVALID_ARGUMENT naming the node when they
// disagree, a dim is unknown or negative, or a shape is absurdly large.
absl::StatusOr<std::vector<TensorShape>> UnpackedShapes(const NodeDef& node);

// A packed tensor holds its parts one after another, each from a byte
// offset that is a multiple of kTensorAlignment (the gaps zeroed), so that
// UnpackTensors hands out views of it instead of copies. Given the parts'
// element counts, returns the packed element count and sets `offsets` to
// each part's element offset; INVALID_ARGUMENT for a negative count, a
// dtype without a size, or a total past 64 bits.
absl::StatusOr<int64_t> PackedLayout(absl::Span<const int64_t> elements, DType dtype, std::vector<int64_t>* offsets);

}  // namespace weft

#endif  // WEFT_GRAPH_OPS_TRANSFER_SHAPES_H_
