#include "graph/builder.h"

#include "absl/strings/str_cat.h"

namespace weft {

Node* GraphBuilder::AddNode(absl::string_view op, absl::Span<const Output> inputs, const AttrList& attrs,
                            absl::string_view name, absl::Span<Node* const> control_inputs) {
  if (!status_.ok()) return nullptr;
  NodeDef def;
  std::string base(name.empty() ? op : name);
  if (!scopes_.empty()) base = absl::StrCat(scopes_.back(), "/", base);
  def.set_name(graph_->UniqueName(base));
  def.set_op(std::string(op));
  def.set_device(device_);
  for (const Output& in : inputs) {
    if (!in.valid()) {
      UpdateStatus(absl::InvalidArgumentError(absl::StrCat("node '", def.name(), "' (", op, "): an input is missing")));
      return nullptr;
    }
    def.add_input(in.name());
  }
  for (Node* c : control_inputs) def.add_input(absl::StrCat("^", c->name()));
  for (const auto& [k, v] : attrs) (*def.mutable_attr())[k] = v;
  if (auto d = op_defaults_.find(def.op()); d != op_defaults_.end()) {
    for (const auto& [k, v] : d->second) {
      if (def.attr().count(k) == 0) (*def.mutable_attr())[k] = v;
    }
  }
  auto node = graph_->AddNode(std::move(def));
  if (!node.ok()) {
    UpdateStatus(node.status());
    return nullptr;
  }
  return *node;
}

Output GraphBuilder::Placeholder(DType dtype, const TensorShape& shape, absl::string_view name) {
  return Op("Placeholder", {}, {Attr("dtype", dtype), Attr("shape", shape)}, name);
}

Output GraphBuilder::Const(const Tensor& value, absl::string_view name) {
  return Op("Const", {}, {Attr("value", value)}, name);
}

Output GraphBuilder::ScalarConst(float value, absl::string_view name) {
  return Const(Tensor::Scalar<float>(value), name);
}

Output GraphBuilder::Variable(absl::string_view name, DType dtype, const TensorShape& shape,
                              absl::string_view initializer, int64_t seed, float init_value) {
  return Op("Variable", {},
            {Attr("dtype", dtype), Attr("shape", shape), Attr("initializer", std::string(initializer)),
             Attr("seed", seed), Attr("init_value", init_value)},
            name);
}

void GraphBuilder::PushScope(absl::string_view scope) {
  scopes_.push_back(scopes_.empty() ? std::string(scope) : absl::StrCat(scopes_.back(), "/", scope));
}

void GraphBuilder::PopScope() {
  if (!scopes_.empty()) scopes_.pop_back();
}

}  // namespace weft
