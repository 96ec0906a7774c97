#include "graph/op_registry.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace weft {

OpRegistry* OpRegistry::Global() {
  static OpRegistry* const registry = new OpRegistry();
  return registry;
}

void OpRegistry::Register(OpDef def) {
  if (ops_.contains(def.name) || def.name.empty() || !def.shape_fn) {
    std::fprintf(stderr, "weft: bad or duplicate op registration '%s'\n", def.name.c_str());
    std::abort();
  }
  std::string name = def.name;
  ops_.emplace(std::move(name), std::make_unique<OpDef>(std::move(def)));
}

const OpDef* OpRegistry::Find(absl::string_view name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : it->second.get();
}

absl::StatusOr<const OpDef*> OpRegistry::Lookup(absl::string_view name) const {
  const OpDef* def = Find(name);
  if (def == nullptr) return absl::NotFoundError(absl::StrCat("unknown op '", name, "'"));
  return def;
}

std::vector<std::string> OpRegistry::OpNames() const {
  std::vector<std::string> names;
  for (const auto& [name, def] : ops_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status UnchangedShape(InferenceContext* c) {
  c->output_types[0] = c->input_types[0];
  c->output_shapes[0] = c->input_shapes[0];
  return absl::OkStatus();
}

absl::Status ScalarFloatShape(InferenceContext* c) {
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = TensorShape{};
  return absl::OkStatus();
}

absl::Status ExpectInputType(InferenceContext* c, int i, DType want) {
  if (c->input_types[i] != want) {
    return c->Error(absl::StrCat("input ", i, " must be ", DTypeName(want), ", got ", DTypeName(c->input_types[i])));
  }
  return absl::OkStatus();
}

absl::Status ExpectInputRank(InferenceContext* c, int i, int rank) {
  if (c->input_shapes[i].rank() != rank) {
    return c->Error(absl::StrCat("input ", i, " must have rank ", rank, ", got shape ",
                                 c->input_shapes[i].DebugString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorShape> MergeShapes(const TensorShape& a, const TensorShape& b) {
  if (a.rank() != b.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shapes ", a.DebugString(), " and ", b.DebugString(), " differ in rank"));
  }
  TensorShape out = a;
  for (int i = 0; i < a.rank(); ++i) {
    if (a.dim(i) < 0) {
      out.set_dim(i, b.dim(i));
    } else if (b.dim(i) >= 0 && a.dim(i) != b.dim(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shapes ", a.DebugString(), " and ", b.DebugString(), " differ in dimension ", i));
    }
  }
  return out;
}

}  // namespace weft
