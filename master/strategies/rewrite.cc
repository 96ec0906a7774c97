#include "master/strategies/rewrite.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/device_name.h"

namespace weft {
namespace master {
namespace strategies {

bool IsUpdate(const NodeDef& n) { return absl::StartsWith(n.op(), "Apply"); }

int64_t VariableBytes(const NodeDef& v) {
  auto shape = GetShapeAttr(v, "shape");
  auto dtype = GetTypeAttr(v, "dtype");
  if (!shape.ok() || !dtype.ok() || !shape->IsFullyDefined()) return 0;
  return shape->num_elements() * static_cast<int64_t>(DTypeSize(*dtype));
}

std::string TaskOf(const std::string& device) {
  const size_t d = device.find("/device:");
  return d == std::string::npos ? device : device.substr(0, d);
}

bool OnGpu(const std::string& device) {
  absl::StatusOr<DeviceName> d = DeviceName::Parse(device);
  return d.ok() && d->type == "GPU";
}

Rename ReplicaRename(int r) {
  return [r](const std::string& s) { return ReplicaName(r, s); };
}

Rewrite::Rewrite(const TrainingGraph& training, const StrategyOptions& options)
    : training(training), options(options), n(static_cast<int>(options.replica_devices.size())) {}

absl::Status Rewrite::Load() {
  in_def = training.graph->ToGraphDef();
  return FindUpdates();
}

absl::Status Rewrite::ResetInput(GraphDef def) {
  in_def = std::move(def);
  variables.clear();
  updates.clear();
  update_names.clear();
  return FindUpdates();
}

absl::Status Rewrite::FindUpdates() {
  by_name.clear();
  for (const NodeDef& nd : in_def.node()) by_name[nd.name()] = &nd;
  for (const NodeDef& nd : in_def.node()) {
    if (nd.op() == "Variable") variables.push_back(nd.name());
    if (!IsUpdate(nd)) continue;
    Update u;
    u.node = &nd;
    int data_inputs = 0;
    for (const std::string& in : nd.input()) data_inputs += absl::StartsWith(in, "^") ? 0 : 1;
    if (data_inputs < 2) {
      return absl::InvalidArgumentError(absl::StrCat("strategy: update '", nd.name(), "' (", nd.op(),
                                                     ") needs a variable and a gradient input"));
    }
    u.grad_input = data_inputs - 1;
    u.grad = nd.input(u.grad_input);
    for (int i = 0; i < u.grad_input; ++i) {
      const std::string var = InputNodeName(nd.input(i));
      auto it = by_name.find(var);
      if (it == by_name.end() || it->second->op() != "Variable") {
        return absl::InvalidArgumentError(absl::StrCat("strategy: input ", i, " of update '", nd.name(), "' (",
                                                       nd.op(), ") is '", nd.input(i), "', not a variable"));
      }
      u.vars.push_back(var);
    }
    u.bytes = VariableBytes(*by_name[u.vars[0]]);
    updates.push_back(std::move(u));
    update_names.insert(nd.name());
  }
  if (updates.empty()) return absl::InvalidArgumentError("strategy: the graph has no optimizer updates");
  return absl::OkStatus();
}

NodeDef* Rewrite::Copy(const NodeDef& nd, int r, const Rename& rename) {
  NodeDef* c = out_def.add_node();
  *c = nd;
  c->set_name(ReplicaName(r, nd.name()));
  c->set_device(options.replica_devices[r]);
  for (std::string& in : *c->mutable_input()) in = RenameInputNode(in, rename);
  return c;
}

NodeDef* Rewrite::FindOut(const std::string& name) {
  for (NodeDef& nd : *out_def.mutable_node()) {
    if (nd.name() == name) return &nd;
  }
  return nullptr;
}

NodeDef* Rewrite::Add(const std::string& name, const std::string& op, const std::string& device,
                      std::vector<std::string> inputs) {
  NodeDef* nd = out_def.add_node();
  nd->set_name(name);
  nd->set_op(op);
  nd->set_device(device);
  for (std::string& in : inputs) nd->add_input(std::move(in));
  return nd;
}

void Rewrite::SetAttr(NodeDef* nd, std::pair<std::string, AttrValue> attr) {
  (*nd->mutable_attr())[attr.first] = attr.second;
}

void Rewrite::MeanLoss() {
  std::vector<std::string> losses;
  for (int r = 0; r < n; ++r) losses.push_back(RenameInputNode(training.loss, ReplicaRename(r)));
  const std::string& dev = options.replica_devices[0];
  if (n == 1) {
    Add("loss", "Identity", dev, {losses[0]});
  } else {
    Add("loss/sum", "AddN", dev, losses);
    NodeDef* scale = Add("loss/scale", "Const", dev, {});
    SetAttr(scale, Attr("value", Tensor::Scalar<float>(1.0f / static_cast<float>(n))));
    Add("loss", "Mul", dev, {"loss/sum", "loss/scale"});
  }
  loss = "loss";
}

std::string Rewrite::Mean(const std::string& name, const std::string& device, std::vector<std::string> terms) {
  if (terms.size() == 1) return terms[0];
  Add(name + "/sum", "AddN", device, std::move(terms));
  NodeDef* scale = Add(name + "/scale", "Const", device, {});
  SetAttr(scale, Attr("value", Tensor::Scalar<float>(1.0f / static_cast<float>(n))));
  Add(name, "Mul", device, {name + "/sum", name + "/scale"});
  return name;
}

void Rewrite::AddSharedVariables(const std::map<std::string, std::string>& device_of) {
  for (const std::string& v : variables) {
    NodeDef* c = out_def.add_node();
    *c = *by_name[v];
    c->set_device(device_of.at(v));
    variable_node[v] = v;
  }
}

absl::StatusOr<ReplicatedGraph> Rewrite::Finish() {
  // A split variable's whole value, for whoever reads it from outside.
  for (const auto& [var, parts] : sharded) {
    NodeDef* value = Add(var + "/value", "ConcatRows", "", {});
    for (const std::string& p : parts) value->add_input(p);
    value->set_device(FindOut(parts[0])->device());
    variable_node[var] = value->name();
  }
  ReplicatedGraph out;
  ASSIGN_OR_RETURN(out.graph, Graph::FromGraphDef(out_def));
  for (int r = 0; r < n; ++r) {
    ReplicaNames names;
    names.features = ReplicaName(r, training.features);
    names.labels = ReplicaName(r, training.labels);
    names.loss = RenameInputNode(training.loss, ReplicaRename(r));
    names.train_op = replica_train[r];
    if (static_cast<size_t>(r) < replica_targets.size()) names.train_targets = replica_targets[r];
    if (!push_outcomes.empty()) names.push_outcomes = push_outcomes[r];
    out.replicas.push_back(std::move(names));
  }
  out.train_op = train_op;
  out.train_targets = train_targets;
  out.loss = loss;
  auto on_replica0 = [](const std::string& t) { return t.empty() ? t : RenameInputNode(t, ReplicaRename(0)); };
  out.correct = on_replica0(training.correct);
  out.eval_loss = on_replica0(training.eval_loss);
  out.correct_top_k = on_replica0(training.correct_top_k);
  for (const auto& [var, node] : variable_node) {
    out.variable_node[var] = node;
    out.variable_device[var] = out.graph->FindNode(node)->def().device();
  }
  out.num_buckets = num_buckets;
  out.num_nccl_groups = num_nccl_groups;
  out.nccl_id_status = nccl_id_status;
  out.replicas_to_aggregate = options.replicas_to_aggregate;
  return out;
}

}  // namespace strategies
}  // namespace master
}  // namespace weft
