// Transfer fusion ops, inserted by FuseCrossTaskTransfers (graph/fuse_transfers.h)
// so that several tensors bound for the same task cross in one message.
//
// PackTensors(x_0, ..., x_n-1) -> packed    packed = the inputs' elements one
//                                          after another, as a 1-D tensor;
//                                          every input has packed's dtype.
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
  int64_t total = 0;
  for (size_t i = 0; i < c->input_shapes.size(); ++i) {
    if (c->input_types[i] != c->input_types[0]) {
      return c->Error(absl::StrCat("input ", i, " is ", DTypeName(c->input_types[i]), ", input 0 is ",
                                   DTypeName(c->input_types[0]), ": packed inputs share one dtype"));
    }
    const TensorShape& shape = c->input_shapes[i];
    if (!shape.IsFullyDefined() || total < 0) {
      total = -1;
      continue;
    }
    const int64_t n = shape.num_elements();  // -1 past 64 bits, never wrapped
    if (n < 0 || !CheckedAdd(total, n, &total)) {
      return c->Error(absl::StrCat("input ", i, " ", shape.DebugString(), ": the packed size overflows 64 bits"));
    }
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
  int64_t total = 0;
  for (const TensorShape& s : shapes) {
    // Each is at most 2^40 elements (UnpackedShapes), but their count is a
    // graph's to choose.
    if (!CheckedAdd(total, s.num_elements(), &total)) return c->Error("the outputs' sizes overflow 64 bits");
  }
  if (in.dim(0) >= 0 && in.dim(0) != total) {
    return c->Error(absl::StrCat("input has ", in.dim(0), " elements, the outputs ", total));
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

WEFT_REGISTER_OP(OpDef{.name = "PackTensors", .num_inputs = -1, .num_outputs = 1, .shape_fn = PackShape});
WEFT_REGISTER_OP(OpDef{.name = "UnpackTensors",
                       .num_inputs = 1,
                       .num_outputs_attr = "num_outputs",
                       .shape_fn = UnpackShape});

}  // namespace weft
