// Typed access to node attributes (NodeDef.attr).
//
// Getters return INVALID_ARGUMENT naming the node and attribute when the
// attribute is missing or has another type; the *Or variants return a default
// when it is missing (and still reject a wrong type).
#ifndef WEFT_GRAPH_ATTR_H_
#define WEFT_GRAPH_ATTR_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"
#include "common/tensor.h"
#include "proto/graph.pb.h"

namespace weft {

absl::StatusOr<int64_t> GetIntAttr(const NodeDef& node, absl::string_view name);
absl::StatusOr<float> GetFloatAttr(const NodeDef& node, absl::string_view name);
absl::StatusOr<bool> GetBoolAttr(const NodeDef& node, absl::string_view name);
absl::StatusOr<std::string> GetStringAttr(const NodeDef& node, absl::string_view name);
absl::StatusOr<DType> GetTypeAttr(const NodeDef& node, absl::string_view name);
absl::StatusOr<TensorShape> GetShapeAttr(const NodeDef& node, absl::string_view name);
absl::StatusOr<std::vector<int64_t>> GetIntListAttr(const NodeDef& node, absl::string_view name);
absl::StatusOr<Tensor> GetTensorAttr(const NodeDef& node, absl::string_view name);

absl::StatusOr<int64_t> GetIntAttrOr(const NodeDef& node, absl::string_view name, int64_t dflt);
absl::StatusOr<float> GetFloatAttrOr(const NodeDef& node, absl::string_view name, float dflt);
absl::StatusOr<bool> GetBoolAttrOr(const NodeDef& node, absl::string_view name, bool dflt);
absl::StatusOr<std::string> GetStringAttrOr(const NodeDef& node, absl::string_view name, std::string dflt);

// Attribute values for building nodes: Attr("transpose_a", true).
using AttrList = std::vector<std::pair<std::string, AttrValue>>;
std::pair<std::string, AttrValue> Attr(std::string name, int64_t v);
inline std::pair<std::string, AttrValue> Attr(std::string name, int v) { return Attr(std::move(name), int64_t{v}); }
std::pair<std::string, AttrValue> Attr(std::string name, float v);
std::pair<std::string, AttrValue> Attr(std::string name, bool v);
std::pair<std::string, AttrValue> Attr(std::string name, std::string v);
inline std::pair<std::string, AttrValue> Attr(std::string name, const char* v) {
  return Attr(std::move(name), std::string(v));
}
std::pair<std::string, AttrValue> Attr(std::string name, DType v);
std::pair<std::string, AttrValue> Attr(std::string name, const TensorShape& v);
std::pair<std::string, AttrValue> Attr(std::string name, const std::vector<int64_t>& v);
std::pair<std::string, AttrValue> Attr(std::string name, const Tensor& v);

}  // namespace weft

#endif  // WEFT_GRAPH_ATTR_H_
