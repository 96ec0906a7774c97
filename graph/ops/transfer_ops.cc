// Transfer fusion ops, inserted by FuseCrossTaskTransfers (graph/fuse_transfers.h)
// so that several tensors bound for the same task cross in one message.
//
// PackTensors(x_0, ..., x_n-1) -> packed    packed = the inputs' elements one
//                                          after another, each from a
//                                          64-byte boundary (PackedLayout),
//                                          as a 1-D tensor; every input has
//                                          packed's dtype.
// UnpackTensors(packed) -> y_0, ..., y_n-1 the inverse: y_i has dtype T and the
//                                          shape given by attrs `ranks` (n
//                                          ranks) and `dims` (their dims, one
//                                          shape after another);
//                                          num_outputs = n.
// No gradients: the rewrite runs on placed graphs, after autodiff.
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "graph/ops/transfer_shapes.h"

namespace weft {
namespace {

absl::Status PackShape(InferenceContext* c) {
  std::vector<int64_t> elements;
  bool known = true;
  for (size_t i = 0; i < c->input_shapes.size(); ++i) {
    if (c->input_types[i] != c->input_types[0]) {
      return c->Error(absl::StrCat("input ", i, " is ", DTypeName(c->input_types[i]), ", input 0 is ",
                                   DTypeName(c->input_types[0]), ": packed inputs share one dtype"));
    }
    const TensorShape& shape = c->input_shapes[i];
    if (!shape.IsFullyDefined()) {
      known = false;
      continue;
    }
    const int64_t n = shape.num_elements();  // -1 past 64 bits, never wrapped
    if (n < 0) return c->Error(absl::StrCat("input ", i, " ", shape.DebugString(), ": its size overflows 64 bits"));
    elements.push_back(n);
  }
  int64_t total = -1;
  if (known) {
    std::vector<int64_t> offsets;
    absl::StatusOr<int64_t> packed = PackedLayout(elements, c->input_types[0], &offsets);
    if (!packed.ok()) return c->Error(packed.status().message());
    total = *packed;
  }
  c->output_types[0] = c->input_types[0];
  c->output_shapes[0] = TensorShape{total};
  return absl::OkStatus();
}

absl::Status UnpackShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(DType dtype, GetTypeAttr(c->node, "T"));
  ASSIGN_OR_RETURN(std::vector<TensorShape> shapes, UnpackedShapes(c->node));
  if (shapes.size() != c->output_types.size()) {
    return c->Error(absl::StrCat("attrs describe ", shapes.size(), " shapes for ", c->output_types.size(),
                                 " outputs"));
  }
  if (c->input_types[0] != dtype) {
    return c->Error(absl::StrCat("input is ", DTypeName(c->input_types[0]), ", T is ", DTypeName(dtype)));
  }
  const TensorShape& in = c->input_shapes[0];
  if (in.rank() != 1) return c->Error(absl::StrCat("input must be 1-D, got ", in.DebugString()));
  // Each is at most 2^40 elements (UnpackedShapes), but their count is a
  // graph's to choose.
  std::vector<int64_t> elements, offsets;
  for (const TensorShape& s : shapes) elements.push_back(s.num_elements());
  absl::StatusOr<int64_t> total = PackedLayout(elements, dtype, &offsets);
  if (!total.ok()) return c->Error(total.status().message());
  if (in.dim(0) >= 0 && in.dim(0) != *total) {
    return c->Error(absl::StrCat("input has ", in.dim(0), " elements, the packed outputs ", *total));
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    c->output_types[i] = dtype;
    c->output_shapes[i] = shapes[i];
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<TensorShape>> UnpackedShapes(const NodeDef& node) {
  ASSIGN_OR_RETURN(std::vector<int64_t> ranks, GetIntListAttr(node, "ranks"));
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, GetIntListAttr(node, "dims"));
  std::vector<TensorShape> shapes;
  size_t next = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || static_cast<size_t>(ranks[i]) > dims.size() - next) {
      return absl::InvalidArgumentError(absl::StrCat("node '", node.name(), "': rank ", ranks[i], " of output ", i,
                                                     " does not fit the ", dims.size(), " dims given"));
    }
    TensorShape s;
    for (int64_t d = 0; d < ranks[i]; ++d) {
      const int64_t dim = dims[next++];
      if (dim < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("node '", node.name(), "': output ", i, " has dim ", dim, "; unpacked shapes are static"));
      }
      s.AddDim(dim);
    }
    // Bounds what a hostile graph can make the kernel allocate.
    if (s.num_elements() < 0 || s.num_elements() > (int64_t{1} << 40)) {
      return absl::InvalidArgumentError(absl::StrCat("node '", node.name(), "': output ", i, " shape ",
                                                     s.DebugString(), " is too large"));
    }
    shapes.push_back(std::move(s));
  }
  if (next != dims.size()) {
    return absl::InvalidArgumentError(absl::StrCat("node '", node.name(), "': ", dims.size() - next,
                                                   " dims left over after ", ranks.size(), " shapes"));
  }
  return shapes;
}

absl::StatusOr<int64_t> PackedLayout(absl::Span<const int64_t> elements, DType dtype, std::vector<int64_t>* offsets) {
  const int64_t size = static_cast<int64_t>(DTypeSize(dtype));
  if (size <= 0 || static_cast<int64_t>(kTensorAlignment) % size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot pack ", DTypeName(dtype), " tensors"));
  }
  const int64_t align = static_cast<int64_t>(kTensorAlignment) / size;  // elements per boundary
  offsets->clear();
  offsets->reserve(elements.size());
  int64_t end = 0;
  for (size_t i = 0; i < elements.size(); ++i) {
    int64_t start = 0;
    if (elements[i] < 0 || !CheckedAdd(end, (align - end % align) % align, &start) ||
        !CheckedAdd(start, elements[i], &end)) {
      return absl::InvalidArgumentError(
          absl::StrCat("part ", i, " (", elements[i], " elements): the packed size overflows 64 bits"));
    }
    offsets->push_back(start);
  }
  return end;
}

WEFT_REGISTER_OP(OpDef{.name = "PackTensors", .num_inputs = -1, .num_outputs = 1, .shape_fn = PackShape});
WEFT_REGISTER_OP(OpDef{.name = "UnpackTensors",
                       .num_inputs = 1,
                       .num_outputs_attr = "num_outputs",
                       .shape_fn = UnpackShape});

}  // namespace weft
