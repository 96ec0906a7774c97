#include "master/elastic_plan.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/attr.h"
#include "common/status_macros.h"
#include "graph/graph.h"
#include "runtime/executor.h"

namespace weft {
namespace master {
namespace {

NodeDef* AddNode(GraphDef* graph, std::string name, std::string op, const std::string& device,
                 std::vector<std::string> inputs) {
  NodeDef* n = graph->add_node();
  n->set_name(std::move(name));
  n->set_op(std::move(op));
  n->set_device(device);
  for (std::string& in : inputs) n->add_input(std::move(in));
  return n;
}

void SetAttr(NodeDef* n, std::pair<std::string, AttrValue> attr) {
  (*n->mutable_attr())[attr.first] = std::move(attr.second);
}

// A step counter on `device` named `name`: a variable of its task
// (shared name "elastic/step", so it outlives a session like every
// variable the strategy shares). Returns its name.
std::string AddCounter(const std::string& name, const std::string& device, GraphDef* graph) {
  NodeDef* var = AddNode(graph, name, "Variable", device, {});
  SetAttr(var, Attr("dtype", DType::kInt64));
  SetAttr(var, Attr("shape", TensorShape({})));
  SetAttr(var, Attr("initializer", "zeros"));
  SetAttr(var, Attr("seed", int64_t{0}));
  SetAttr(var, Attr("init_value", 0.0f));
  SetAttr(var, Attr("shared_name", kElasticStepVariable));
  return name;
}

// Replica r's barrier, commit updates and increment of `counter`, on
// `device`, gating the updates that its train op (node `train` of `graph`)
// runs.
absl::StatusOr<std::string> GateReplica(int r, int train, const std::string& device, const std::string& counter,
                                        const absl::flat_hash_map<std::string, int>& index, GraphDef* graph) {
  // The updates are what the replica's train op runs.
  std::vector<int> updates;
  for (const std::string& in : graph->node(train).input()) {
    auto u = index.find(InputNodeName(in));
    if (u == index.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("elastic state: replica ", r, "'s train op runs '", in, "', which is not in the graph"));
    }
    updates.push_back(u->second);
  }
  NodeDef* one = AddNode(graph, ReplicaName(r, "elastic/one"), "Const", device, {});
  SetAttr(one, Attr("value", Tensor::Scalar<int64_t>(1)));
  // The barrier waits for every input of every update and of the
  // increment, so that nothing a commit node needs is left to run once the
  // step is aborted.
  NodeDef* barrier = AddNode(graph, ReplicaName(r, "elastic/commit"), "NoOp", device, {});
  SetAttr(barrier, Attr(kCommitAttr, true));
  absl::flat_hash_set<std::string> waits;
  auto wait_for = [&](const std::string& input) {
    const std::string node = InputNodeName(input);
    if (waits.insert(node).second) barrier->add_input("^" + node);
  };
  for (int u : updates) {
    NodeDef* update = graph->mutable_node(u);
    for (int i = 0; i < update->input_size(); ++i) {
      const std::string in = update->input(i);
      auto src = index.find(InputNodeName(in));
      // A value from another device (an async PS replica's gradient, from
      // its worker) reaches the update through an Identity beside it, and
      // the barrier waits for that. Waiting for the remote node itself
      // would cost a control message per input and step, besides the
      // value's (graph/partition.cc).
      if (in[0] != '^' && update->device() == device && src != index.end() &&
          graph->node(src->second).device() != device && graph->node(src->second).op() != "Variable") {
        NodeDef* local = AddNode(graph, absl::StrCat(update->name(), "/elastic/input_", i), "Identity", device, {in});
        update->set_input(i, local->name());
        wait_for(local->name());
      } else {
        wait_for(in);
      }
    }
  }
  wait_for(counter);
  wait_for(one->name());
  NodeDef* add = AddNode(graph, ReplicaName(r, "elastic/step_add"), "AssignAdd", device, {counter, one->name()});
  SetAttr(add, Attr(kCommitAttr, true));
  for (int u : updates) {
    NodeDef* update = graph->mutable_node(u);
    update->add_input("^" + barrier->name());
    SetAttr(update, Attr(kCommitAttr, true));
    add->add_input("^" + update->name());
  }
  graph->mutable_node(train)->add_input("^" + add->name());
  return add->name();
}

// A step that targets the updates rather than the train op (PS: each
// update on its ps) must run the increment too.
void TargetIncrement(const std::string& train_op, const std::string& increment, std::vector<std::string>* targets) {
  if (targets->empty() || std::find(targets->begin(), targets->end(), train_op) != targets->end()) return;
  targets->push_back(increment);
}

// Copy targets: sync_from[k] (one per other replica, on its device) assigns
// replica k's value of every variable, the counter included, to that
// replica's.
void AddCopies(const ReplicatedGraph& replicated, const std::vector<std::string>& replica_devices, GraphDef* graph,
               ElasticNames* names) {
  const int n = static_cast<int>(replica_devices.size());
  std::vector<std::string> variables;
  for (const auto& [name, node] : replicated.variable_node) variables.push_back(name);
  variables.push_back(kElasticStepVariable);
  for (int k = 0; k < n; ++k) {
    for (int r = 0; r < n; ++r) {
      if (r == k) continue;
      const std::string target = ReplicaName(r, absl::StrCat("elastic/sync_from_", k));
      std::vector<std::string> assigns;
      for (const std::string& v : variables) {
        NodeDef* assign = AddNode(graph, absl::StrCat(target, "/", v), "Assign", replica_devices[r],
                                  {ReplicaName(r, v), ReplicaName(k, v)});
        assigns.push_back("^" + assign->name());
      }
      AddNode(graph, target, "NoOp", replica_devices[r], std::move(assigns));
      names->sync_from[k].push_back(target);
    }
  }
}

}  // namespace

absl::Status AddElasticState(const std::vector<std::string>& replica_devices, const std::string& shared_device,
                             ReplicatedGraph* rg, GraphDef* graph, ElasticNames* names) {
  const ReplicatedGraph& replicated = *rg;
  const int n = static_cast<int>(replicated.replicas.size());
  if (static_cast<int>(replica_devices.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("elastic state: ", replica_devices.size(), " replica devices for ", n, " replicas"));
  }
  absl::flat_hash_map<std::string, int> index;
  for (int i = 0; i < graph->node_size(); ++i) index[graph->node(i).name()] = i;
  names->step_reads.clear();
  names->sync_from.assign(shared_device.empty() ? n : 0, {});
  names->shared = !shared_device.empty();
  const std::string shared_counter =
      shared_device.empty() ? std::string() : AddCounter(kElasticStepVariable, shared_device, graph);
  absl::flat_hash_set<std::string> gated;  // train ops; sync replicas share one
  for (int r = 0; r < n; ++r) {
    const std::string& train_op = replicated.replicas[r].train_op;
    auto train = index.find(train_op);
    if (train == index.end()) {
      return absl::InvalidArgumentError(absl::StrCat("elastic state: replica ", r, " has no train op '",
                                                     train_op, "'"));
    }
    if (!gated.insert(train_op).second) continue;
    const std::string& device = shared_device.empty() ? replica_devices[r] : shared_device;
    const std::string counter = shared_device.empty()
                                    ? AddCounter(ReplicaName(r, kElasticStepVariable), device, graph)
                                    : shared_counter;
    ASSIGN_OR_RETURN(const std::string increment, GateReplica(r, train->second, device, counter, index, graph));
    TargetIncrement(train_op, increment, &rg->train_targets);
    TargetIncrement(train_op, increment, &rg->replicas[r].train_targets);
    if (shared_device.empty() || names->step_reads.empty()) {
      names->step_reads.push_back(
          AddNode(graph, absl::StrCat(counter, "/read"), "Identity", device, {counter})->name());
    }
  }
  if (shared_device.empty()) AddCopies(replicated, replica_devices, graph, names);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> AppliedSteps(const Tensor& value, const std::string& source) {
  if (value.dtype() != DType::kInt64 || value.NumElements() != 1) {
    return absl::DataLossError(absl::StrCat("the step counter ", kElasticStepVariable, " of ", source,
                                            " is not one int64 but ", DTypeName(value.dtype()), "[",
                                            value.NumElements(), " element(s)]"));
  }
  const int64_t n = value.data<int64_t>()[0];
  if (n < 0) {
    return absl::DataLossError(
        absl::StrCat("the step counter ", kElasticStepVariable, " of ", source, " says ", n, " steps"));
  }
  return n;
}

}  // namespace master
}  // namespace weft
