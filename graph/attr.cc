#include "graph/attr.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tensor_proto_coding.h"

namespace weft {
namespace {

absl::StatusOr<const AttrValue*> Find(const NodeDef& node, absl::string_view name, AttrValue::ValueCase want,
                                      const char* type_name) {
  auto it = node.attr().find(std::string(name));
  if (it == node.attr().end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", node.name(), "' (", node.op(), ") is missing attribute '", name, "'"));
  }
  if (it->second.value_case() != want) {
    return absl::InvalidArgumentError(absl::StrCat("node '", node.name(), "' (", node.op(), "): attribute '", name,
                                                   "' must be of type ", type_name));
  }
  return &it->second;
}

bool Has(const NodeDef& node, absl::string_view name) { return node.attr().count(std::string(name)) > 0; }

}  // namespace

absl::StatusOr<int64_t> GetIntAttr(const NodeDef& node, absl::string_view name) {
  ASSIGN_OR_RETURN(const AttrValue* v, Find(node, name, AttrValue::kI, "int"));
  return v->i();
}
absl::StatusOr<float> GetFloatAttr(const NodeDef& node, absl::string_view name) {
  ASSIGN_OR_RETURN(const AttrValue* v, Find(node, name, AttrValue::kF, "float"));
  return v->f();
}
absl::StatusOr<bool> GetBoolAttr(const NodeDef& node, absl::string_view name) {
  ASSIGN_OR_RETURN(const AttrValue* v, Find(node, name, AttrValue::kB, "bool"));
  return v->b();
}
absl::StatusOr<std::string> GetStringAttr(const NodeDef& node, absl::string_view name) {
  ASSIGN_OR_RETURN(const AttrValue* v, Find(node, name, AttrValue::kS, "string"));
  return v->s();
}
absl::StatusOr<DType> GetTypeAttr(const NodeDef& node, absl::string_view name) {
  ASSIGN_OR_RETURN(const AttrValue* v, Find(node, name, AttrValue::kType, "type"));
  if (!IsValidDType(v->type())) {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", node.name(), "': attribute '", name, "' holds invalid dtype ", v->type()));
  }
  return static_cast<DType>(v->type());
}
absl::StatusOr<TensorShape> GetShapeAttr(const NodeDef& node, absl::string_view name) {
  ASSIGN_OR_RETURN(const AttrValue* v, Find(node, name, AttrValue::kShape, "shape"));
  auto s = ShapeFromProto(v->shape());
  if (!s.ok()) return Annotate(s.status(), absl::StrCat("node '", node.name(), "' attribute '", name, "'"));
  return s;
}
absl::StatusOr<std::vector<int64_t>> GetIntListAttr(const NodeDef& node, absl::string_view name) {
  ASSIGN_OR_RETURN(const AttrValue* v, Find(node, name, AttrValue::kList, "list"));
  return std::vector<int64_t>(v->list().i().begin(), v->list().i().end());
}
absl::StatusOr<Tensor> GetTensorAttr(const NodeDef& node, absl::string_view name) {
  ASSIGN_OR_RETURN(const AttrValue* v, Find(node, name, AttrValue::kTensor, "tensor"));
  auto t = TensorFromProto(v->tensor());
  if (!t.ok()) return Annotate(t.status(), absl::StrCat("node '", node.name(), "' attribute '", name, "'"));
  return t;
}

absl::StatusOr<int64_t> GetIntAttrOr(const NodeDef& node, absl::string_view name, int64_t dflt) {
  return Has(node, name) ? GetIntAttr(node, name) : dflt;
}
absl::StatusOr<float> GetFloatAttrOr(const NodeDef& node, absl::string_view name, float dflt) {
  return Has(node, name) ? GetFloatAttr(node, name) : dflt;
}
absl::StatusOr<bool> GetBoolAttrOr(const NodeDef& node, absl::string_view name, bool dflt) {
  return Has(node, name) ? GetBoolAttr(node, name) : dflt;
}
absl::StatusOr<std::string> GetStringAttrOr(const NodeDef& node, absl::string_view name, std::string dflt) {
  return Has(node, name) ? GetStringAttr(node, name) : absl::StatusOr<std::string>(std::move(dflt));
}

std::pair<std::string, AttrValue> Attr(std::string name, int64_t v) {
  AttrValue a;
  a.set_i(v);
  return {std::move(name), a};
}
std::pair<std::string, AttrValue> Attr(std::string name, float v) {
  AttrValue a;
  a.set_f(v);
  return {std::move(name), a};
}
std::pair<std::string, AttrValue> Attr(std::string name, bool v) {
  AttrValue a;
  a.set_b(v);
  return {std::move(name), a};
}
std::pair<std::string, AttrValue> Attr(std::string name, std::string v) {
  AttrValue a;
  a.set_s(std::move(v));
  return {std::move(name), a};
}
std::pair<std::string, AttrValue> Attr(std::string name, DType v) {
  AttrValue a;
  a.set_type(DTypeToProto(v));
  return {std::move(name), a};
}
std::pair<std::string, AttrValue> Attr(std::string name, const TensorShape& v) {
  AttrValue a;
  ShapeToProto(v, a.mutable_shape());
  return {std::move(name), a};
}
std::pair<std::string, AttrValue> Attr(std::string name, const std::vector<int64_t>& v) {
  AttrValue a;
  for (int64_t x : v) a.mutable_list()->add_i(x);
  return {std::move(name), a};
}
std::pair<std::string, AttrValue> Attr(std::string name, const Tensor& v) {
  AttrValue a;
  TensorToProto(v, a.mutable_tensor());
  return {std::move(name), a};
}

}  // namespace weft
