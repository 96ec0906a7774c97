#include "runtime/executor_plan.h"

#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"

namespace weft {
namespace {

// (node id, output index) -> feed index.
using FedMap = absl::flat_hash_map<std::pair<int, int>, int>;

bool IsFed(const FedMap& fed, const Endpoint& e) { return fed.contains(std::make_pair(e.node->id(), e.index)); }

absl::StatusOr<FedMap> ResolveFeeds(const Graph& graph, const ExecutorOptions& options, ExecutorPlan* plan) {
  FedMap fed;
  for (size_t f = 0; f < options.feeds.size(); ++f) {
    auto e = graph.FindEndpoint(options.feeds[f]);
    if (!e.ok()) return Annotate(e.status(), absl::StrCat("feed '", options.feeds[f], "'"));
    if (!fed.emplace(std::make_pair(e->node->id(), e->index), static_cast<int>(f)).second) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", options.feeds[f], "' is fed twice"));
    }
    plan->feed_endpoints.push_back(*e);
  }
  return fed;
}

// The nodes that the fetches and targets need, cut at fed tensors, by id;
// the fetches' endpoints in *fetch_eps.
absl::StatusOr<std::vector<bool>> Prune(const Graph& graph, const ExecutorOptions& options, const FedMap& fed,
                                        std::vector<Endpoint>* fetch_eps) {
  std::vector<bool> needed(graph.num_nodes(), false);
  std::vector<Node*> work;
  auto need = [&](Node* node) {
    if (!needed[node->id()]) {
      needed[node->id()] = true;
      work.push_back(node);
    }
  };
  for (const std::string& name : options.fetches) {
    auto e = graph.FindEndpoint(name);
    if (!e.ok()) return Annotate(e.status(), absl::StrCat("fetch '", name, "'"));
    fetch_eps->push_back(*e);
    if (!IsFed(fed, *e)) need(e->node);
  }
  for (const std::string& name : options.targets) {
    Node* node = graph.FindNode(name);
    if (node == nullptr) return absl::NotFoundError(absl::StrCat("target '", name, "' names no node in the graph"));
    need(node);
  }
  while (!work.empty()) {
    Node* node = work.back();
    work.pop_back();
    for (const Endpoint& e : node->inputs()) {
      if (!IsFed(fed, e)) need(e.node);
    }
    for (Node* c : node->control_inputs()) need(c);
  }
  return needed;
}

// One item (and kernel) per needed node, in id order; *item_of maps a node
// id to its item, -1 for pruned nodes.
absl::Status CreateItems(const Graph& graph, Device* device, const ResourceContainerFn* containers,
                         const std::vector<bool>& needed, std::vector<int>* item_of,
                         ExecutorPlan* plan) {
  item_of->assign(graph.num_nodes(), -1);
  for (int id = 0; id < graph.num_nodes(); ++id) {
    if (!needed[id]) continue;
    (*item_of)[id] = static_cast<int>(plan->items.size());
    NodeItem item;
    item.node = graph.node(id);
    item.first_slot = plan->num_slots;
    item.num_outputs = item.node->num_outputs();
    plan->num_slots += item.num_outputs;
    ASSIGN_OR_RETURN(item.kernel, KernelRegistry::Global()->Create(item.node, device, containers));
    ASSIGN_OR_RETURN(item.commit, GetBoolAttrOr(item.node->def(), kCommitAttr, false));
    if (item.kernel->AsAsync() != nullptr) item.async_index = plan->num_async++;
    plan->items.push_back(std::move(item));
  }
  return absl::OkStatus();
}

// Inputs, successors and the counts a step starts from.
void WireEdges(const FedMap& fed, const std::vector<int>& item_of, ExecutorPlan* plan) {
  plan->initial_slot_refs.assign(plan->num_slots, 0);
  for (NodeItem& item : plan->items) {
    const int self = item_of[item.node->id()];
    for (const Endpoint& e : item.node->inputs()) {
      auto f = fed.find(std::make_pair(e.node->id(), e.index));
      if (f != fed.end()) {
        item.inputs.push_back(InputSource{true, f->second});
        continue;
      }
      NodeItem& producer = plan->items[item_of[e.node->id()]];
      const int slot = producer.first_slot + e.index;
      item.inputs.push_back(InputSource{false, slot});
      ++plan->initial_slot_refs[slot];
      producer.successors.push_back(self);
      ++item.initial_pending;
    }
    for (Node* c : item.node->control_inputs()) {
      plan->items[item_of[c->id()]].successors.push_back(self);
      ++item.initial_pending;
    }
  }
  for (size_t i = 0; i < plan->items.size(); ++i) {
    if (plan->items[i].initial_pending == 0) plan->roots.push_back(static_cast<int>(i));
  }
}

}  // namespace

absl::Status BuildExecutorPlan(const Graph& graph, Device* device, const ExecutorOptions& options, ExecutorPlan* plan) {
  ASSIGN_OR_RETURN(FedMap fed, ResolveFeeds(graph, options, plan));
  std::vector<Endpoint> fetch_eps;
  ASSIGN_OR_RETURN(std::vector<bool> needed, Prune(graph, options, fed, &fetch_eps));
  std::vector<int> item_of;
  RETURN_IF_ERROR(CreateItems(graph, device, &options.containers, needed, &item_of, plan));
  WireEdges(fed, item_of, plan);
  for (const Endpoint& e : fetch_eps) {
    auto f = fed.find(std::make_pair(e.node->id(), e.index));
    if (f != fed.end()) {
      plan->fetch_sources.push_back(InputSource{true, f->second});
    } else {
      const int slot = plan->items[item_of[e.node->id()]].first_slot + e.index;
      plan->fetch_sources.push_back(InputSource{false, slot});
      ++plan->initial_slot_refs[slot];  // a fetched tensor outlives its consumers
    }
  }
  return absl::OkStatus();
}

}  // namespace weft
