#include "graph/ops/variable_shapes.h"

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "graph/attr.h"

namespace weft {
namespace {

absl::StatusOr<int64_t> DefinedNumElements(const TensorShape& shape, absl::string_view attr) {
  if (!shape.IsFullyDefined()) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute '", attr, "' ", shape.DebugString(), " must be fully defined"));
  }
  return CheckedNumElements(shape.dims(), absl::StrCat("attribute '", attr, "' ", shape.DebugString()));
}

}  // namespace

absl::StatusOr<VariableShapes> GetVariableShapes(const NodeDef& node) {
  VariableShapes v;
  ASSIGN_OR_RETURN(v.shape, GetShapeAttr(node, "shape"));
  ASSIGN_OR_RETURN(v.num_elements, DefinedNumElements(v.shape, "shape"));
  v.init_shape = v.shape;
  v.init_num_elements = v.num_elements;
  ASSIGN_OR_RETURN(v.row_offset, GetIntAttrOr(node, "row_offset", 0));
  if (node.attr().count("init_shape") == 0) {
    if (v.row_offset != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'row_offset' is ", v.row_offset, " without an 'init_shape' to offset into"));
    }
    return v;
  }
  ASSIGN_OR_RETURN(v.init_shape, GetShapeAttr(node, "init_shape"));
  ASSIGN_OR_RETURN(v.init_num_elements, DefinedNumElements(v.init_shape, "init_shape"));
  const std::string shapes =
      absl::StrCat("attribute 'init_shape' ", v.init_shape.DebugString(), " and 'shape' ", v.shape.DebugString());
  if (v.shape.rank() < 1 || v.init_shape.rank() != v.shape.rank()) {
    return absl::InvalidArgumentError(absl::StrCat(shapes, " must have the same rank, at least 1"));
  }
  for (int d = 1; d < v.shape.rank(); ++d) {
    if (v.init_shape.dim(d) != v.shape.dim(d)) {
      return absl::InvalidArgumentError(absl::StrCat(shapes, " differ in dim ", d, ": a shard keeps the rows' size"));
    }
  }
  if (!RangeWithin(v.row_offset, v.shape.dim(0), v.init_shape.dim(0))) {
    return absl::InvalidArgumentError(absl::StrCat("rows [", v.row_offset, ", +", v.shape.dim(0),
                                                   ") (attributes 'row_offset', 'shape') are outside ", shapes));
  }
  return v;
}

}  // namespace weft
