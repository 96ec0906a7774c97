#include "master/elastic_plan.h"

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

// The counter of replica r on `device`: a variable of its task that the
// sync copies like the model's. Returns its name.
std::string AddCounter(int r, const std::string& device, GraphDef* graph) {
  const std::string counter = ReplicaName(r, kElasticStepVariable);
  NodeDef* var = AddNode(graph, counter, "Variable", device, {});
  SetAttr(var, Attr("dtype", DType::kInt64));
  SetAttr(var, Attr("shape", TensorShape({})));
  SetAttr(var, Attr("initializer", "zeros"));
  SetAttr(var, Attr("seed", int64_t{0}));
  SetAttr(var, Attr("init_value", 0.0f));
  SetAttr(var, Attr("shared_name", kElasticStepVariable));
  return counter;
}

// Replica r's barrier, commit updates and counter increment, gating the
// updates that its train op (node `train` of `graph`) runs. Returns the
// counter's read.
absl::StatusOr<std::string> GateReplica(int r, int train, const std::string& device,
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
  const std::string counter = AddCounter(r, device, graph);
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
    for (const std::string& in : graph->node(u).input()) wait_for(in);
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
  return AddNode(graph, ReplicaName(r, "elastic/step_read"), "Identity", device, {counter})->name();
}

}  // namespace

absl::Status AddElasticState(const ReplicatedGraph& replicated, const std::vector<std::string>& replica_devices,
                             GraphDef* graph, ElasticNames* names) {
  const int n = static_cast<int>(replicated.replicas.size());
  if (static_cast<int>(replica_devices.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("elastic state: ", replica_devices.size(), " replica devices for ", n, " replicas"));
  }
  absl::flat_hash_map<std::string, int> index;
  for (int i = 0; i < graph->node_size(); ++i) index[graph->node(i).name()] = i;
  names->step_reads.clear();
  names->sync_from.assign(n, {});
  for (int r = 0; r < n; ++r) {
    auto train = index.find(replicated.replicas[r].train_op);
    if (train == index.end()) {
      return absl::InvalidArgumentError(absl::StrCat("elastic state: replica ", r, " has no train op '",
                                                     replicated.replicas[r].train_op, "'"));
    }
    ASSIGN_OR_RETURN(std::string read, GateReplica(r, train->second, replica_devices[r], index, graph));
    names->step_reads.push_back(std::move(read));
  }
  // Every variable of one replica (its name in the one-replica graph), and
  // the counter; one copy target per (source, other replica).
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
  return absl::OkStatus();
}

}  // namespace master
}  // namespace weft
