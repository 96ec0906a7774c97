#include "graph/graph.h"

#include <algorithm>
#include <deque>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "graph/attr.h"

namespace weft {

// Bounds an attribute-given output count, so a hostile graph cannot make a
// node allocate millions of output slots.
constexpr int64_t kMaxAttrOutputs = 1 << 16;

std::string Node::DebugName() const { return absl::StrCat("'", name(), "' (", op(), ")"); }

absl::Status ParseTensorName(absl::string_view s, std::string* node, int* index) {
  if (s.empty()) return absl::InvalidArgumentError("empty tensor name");
  if (s[0] == '^') {
    if (s.size() == 1) return absl::InvalidArgumentError("control input '^' names no node");
    *node = std::string(s.substr(1));
    *index = -1;
    return absl::OkStatus();
  }
  const size_t colon = s.rfind(':');
  if (colon == absl::string_view::npos) {
    *node = std::string(s);
    *index = 0;
    return absl::OkStatus();
  }
  int k = 0;
  if (colon == 0 || !absl::SimpleAtoi(s.substr(colon + 1), &k) || k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("malformed tensor name '", s, "' (expected name or name:k)"));
  }
  *node = std::string(s.substr(0, colon));
  *index = k;
  return absl::OkStatus();
}

std::string TensorName(const Endpoint& e) {
  return e.index == 0 ? e.node->name() : absl::StrCat(e.node->name(), ":", e.index);
}

std::string InputNodeName(absl::string_view input) {
  std::string name;
  int index = 0;
  if (!ParseTensorName(input, &name, &index).ok()) return std::string(input);
  return name;
}

std::string RenameInputNode(absl::string_view input, const std::function<std::string(const std::string&)>& rename) {
  if (absl::StartsWith(input, "^")) return absl::StrCat("^", rename(std::string(input.substr(1))));
  const size_t colon = input.rfind(':');
  if (colon == absl::string_view::npos) return rename(std::string(input));
  return absl::StrCat(rename(std::string(input.substr(0, colon))), input.substr(colon));
}

absl::StatusOr<Node*> Graph::AddNode(NodeDef def) { return AddNodeImpl(std::move(def), nullptr); }

absl::StatusOr<Node*> Graph::AddNodeSkippingInference(NodeDef def, std::vector<DType> output_types) {
  return AddNodeImpl(std::move(def), &output_types);
}

absl::StatusOr<Node*> Graph::AddNodeImpl(NodeDef def, std::vector<DType>* skip_inference_types) {
  if (def.name().empty()) return absl::InvalidArgumentError(absl::StrCat("a node of op '", def.op(), "' has no name"));
  const std::string where = absl::StrCat("node '", def.name(), "' (", def.op(), ")");
  if (by_name_.contains(def.name())) return absl::InvalidArgumentError(absl::StrCat(where, ": duplicate node name"));
  auto op_def = OpRegistry::Global()->Lookup(def.op());
  if (!op_def.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", op_def.status().message()));

  auto node = std::make_unique<Node>();
  node->op_def_ = *op_def;
  RETURN_IF_ERROR(ResolveInputs(def, where, node.get()));
  RETURN_IF_ERROR(InferOutputs(def, where, skip_inference_types, node.get()));
  node->def_ = std::move(def);
  node->id_ = num_nodes();
  Node* raw = node.get();
  for (int i = 0; i < raw->num_inputs(); ++i) {
    raw->inputs_[i].node->out_edges_.push_back(Node::OutEdge{raw, raw->inputs_[i].index, i});
  }
  for (Node* c : raw->control_inputs_) c->control_outputs_.push_back(raw);
  by_name_.emplace(raw->name(), raw);
  nodes_.push_back(std::move(node));
  return raw;
}

absl::Status Graph::ResolveInputs(const NodeDef& def, const std::string& where, Node* node) const {
  bool seen_control = false;
  for (const std::string& in : def.input()) {
    std::string src_name;
    int index = 0;
    RETURN_IF_ERROR(Annotate(ParseTensorName(in, &src_name, &index), where));
    Node* src = FindNode(src_name);
    if (src == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": input '", in, "' names no node in the graph"));
    }
    if (index < 0) {
      seen_control = true;
      node->control_inputs_.push_back(src);
      continue;
    }
    if (seen_control) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": data input '", in, "' follows a control input"));
    }
    if (index >= src->num_outputs()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": input '", in, "' asks for output ", index, " of ", src->DebugName(), ", which has ",
                       src->num_outputs(), " output(s)"));
    }
    node->inputs_.push_back(Endpoint{src, index});
  }
  const OpDef& od = node->op_def();
  const int n_in = node->num_inputs();
  if ((od.num_inputs >= 0 && n_in != od.num_inputs) || (od.num_inputs < 0 && n_in < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": expects ", od.num_inputs < 0 ? std::string("at least 1") : std::to_string(od.num_inputs),
        " input(s), got ", n_in));
  }
  return absl::OkStatus();
}

absl::Status Graph::InferOutputs(const NodeDef& def, const std::string& where,
                                 std::vector<DType>* skip_inference_types, Node* node) {
  const OpDef& od = node->op_def();
  const int n_in = node->num_inputs();
  InferenceContext ctx{def, {}, {}, {}, {}};
  for (const Endpoint& e : node->inputs_) {
    ctx.input_types.push_back(e.node->output_type(e.index));
    ctx.input_shapes.push_back(e.node->output_shape(e.index));
  }
  int n_out = od.num_outputs < 0 ? n_in : od.num_outputs;
  if (!od.num_outputs_attr.empty()) {
    auto count = GetIntAttr(def, od.num_outputs_attr);
    if (!count.ok()) return absl::Status(count.status().code(), absl::StrCat(where, ": ", count.status().message()));
    if (*count < 1 || *count > kMaxAttrOutputs) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": attribute '", od.num_outputs_attr, "' is ", *count,
                                                     "; it must be between 1 and ", kMaxAttrOutputs));
    }
    n_out = static_cast<int>(*count);
  }
  ctx.output_types.assign(n_out, DType::kInvalid);
  ctx.output_shapes.assign(n_out, TensorShape{});
  if (skip_inference_types != nullptr) {
    if (static_cast<int>(skip_inference_types->size()) != n_out) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", skip_inference_types->size(),
                                                     " output type(s) given for ", n_out, " output(s)"));
    }
    ctx.output_types = std::move(*skip_inference_types);
  }
  absl::Status s = skip_inference_types != nullptr ? absl::OkStatus() : od.shape_fn(&ctx);
  if (!s.ok()) {
    std::vector<std::string> ins;
    for (int i = 0; i < n_in; ++i) {
      ins.push_back(absl::StrCat(DTypeName(ctx.input_types[i]), ctx.input_shapes[i].DebugString()));
    }
    return absl::Status(s.code(), absl::StrCat(where, ": ", s.message(), " (inputs: ", absl::StrJoin(ins, ", "), ")"));
  }
  for (int i = 0; i < n_out; ++i) {
    if (ctx.output_types[i] == DType::kInvalid) {
      return absl::InternalError(absl::StrCat(where, ": shape function left output ", i, " without a dtype"));
    }
  }
  node->output_types_ = std::move(ctx.output_types);
  node->output_shapes_ = std::move(ctx.output_shapes);
  return absl::OkStatus();
}

absl::Status Graph::AddControlEdge(Node* src, Node* dst) {
  if (src->id() >= dst->id()) {
    return absl::InvalidArgumentError(
        absl::StrCat("control edge ", src->DebugName(), " -> ", dst->DebugName(), " would break topological order"));
  }
  for (Node* c : dst->control_inputs_) {
    if (c == src) return absl::OkStatus();
  }
  dst->control_inputs_.push_back(src);
  src->control_outputs_.push_back(dst);
  dst->def_.add_input(absl::StrCat("^", src->name()));
  return absl::OkStatus();
}

Node* Graph::FindNode(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

absl::StatusOr<Endpoint> Graph::FindEndpoint(absl::string_view tensor_name) const {
  std::string name;
  int index = 0;
  RETURN_IF_ERROR(ParseTensorName(tensor_name, &name, &index));
  if (index < 0) return absl::InvalidArgumentError(absl::StrCat("'", tensor_name, "' names a control input, not a tensor"));
  Node* n = FindNode(name);
  if (n == nullptr) return absl::NotFoundError(absl::StrCat("no node named '", name, "' in the graph"));
  if (index >= n->num_outputs()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", tensor_name, "': ", n->DebugName(), " has ", n->num_outputs(), " output(s)"));
  }
  return Endpoint{n, index};
}

std::string Graph::UniqueName(absl::string_view base) const {
  if (!by_name_.contains(base)) return std::string(base);
  for (int i = 1;; ++i) {
    std::string candidate = absl::StrCat(base, "_", i);
    if (!by_name_.contains(candidate)) return candidate;
  }
}

absl::StatusOr<std::unique_ptr<Graph>> Graph::FromGraphDef(const GraphDef& def) {
  // Kahn's algorithm over the NodeDefs, so nodes may be listed in any order.
  const int n = def.node_size();
  absl::flat_hash_map<std::string, int> index;
  for (int i = 0; i < n; ++i) {
    const NodeDef& nd = def.node(i);
    if (nd.name().empty()) return absl::InvalidArgumentError(absl::StrCat("graph node #", i, " has no name"));
    if (!index.emplace(nd.name(), i).second) {
      return absl::InvalidArgumentError(absl::StrCat("graph has two nodes named '", nd.name(), "'"));
    }
  }
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> consumers(n);
  for (int i = 0; i < n; ++i) {
    for (const std::string& in : def.node(i).input()) {
      std::string src;
      int k = 0;
      RETURN_IF_ERROR(Annotate(ParseTensorName(in, &src, &k), absl::StrCat("node '", def.node(i).name(), "'")));
      auto it = index.find(src);
      if (it == index.end()) {
        return absl::InvalidArgumentError(absl::StrCat("node '", def.node(i).name(), "' (", def.node(i).op(),
                                                       "): input '", in, "' names no node in the graph"));
      }
      ++pending[i];
      consumers[it->second].push_back(i);
    }
  }
  std::deque<int> ready;
  for (int i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push_back(i);
  }
  auto graph = std::make_unique<Graph>();
  while (!ready.empty()) {
    const int i = ready.front();
    ready.pop_front();
    RETURN_IF_ERROR(graph->AddNode(def.node(i)).status());
    for (int c : consumers[i]) {
      if (--pending[c] == 0) ready.push_back(c);
    }
  }
  if (graph->num_nodes() < n) {
    // Every node left has a pending input; walk inputs from one until a node repeats.
    int start = 0;
    while (pending[start] == 0) ++start;
    std::vector<int> path;
    absl::flat_hash_map<int, int> pos;
    int cur = start;
    while (!pos.contains(cur)) {
      pos[cur] = static_cast<int>(path.size());
      path.push_back(cur);
      for (const std::string& in : def.node(cur).input()) {
        std::string src;
        int k = 0;
        ParseTensorName(in, &src, &k).IgnoreError();
        const int s = index.at(src);
        if (pending[s] > 0) {
          cur = s;
          break;
        }
      }
    }
    std::vector<std::string> names;
    for (size_t j = pos[cur]; j < path.size(); ++j) names.push_back(def.node(path[j]).name());
    names.push_back(def.node(cur).name());
    std::reverse(names.begin(), names.end());
    return absl::InvalidArgumentError(absl::StrCat("graph has a cycle: ", absl::StrJoin(names, " -> ")));
  }
  return graph;
}

GraphDef Graph::ToGraphDef() const {
  GraphDef out;
  for (const auto& n : nodes_) *out.add_node() = n->def_;
  return out;
}

std::unique_ptr<Graph> Graph::Clone() const {
  auto g = std::make_unique<Graph>();
  for (const auto& n : nodes_) {
    Node* c = g->AddNode(n->def_).value();  // cannot fail: the same nodes were accepted in this order
    c->assigned_device_ = n->assigned_device_;
  }
  return g;
}

}  // namespace weft
