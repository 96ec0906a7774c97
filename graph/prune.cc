#include "graph/prune.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"

namespace weft {
namespace {

using EndpointKey = std::pair<int, int>;  // (node id, output index)

absl::Status BadName(absl::string_view what, absl::string_view name, const absl::Status& why) {
  return absl::InvalidArgumentError(absl::StrCat(what, " '", name, "': ", why.message()));
}

using FedMap = absl::flat_hash_map<EndpointKey, std::string>;  // fed endpoint -> its feed placeholder

// Fed endpoints, in the order given, without repeats, and the name of each
// one's feed placeholder.
absl::Status CollectFeeds(const Graph& in, const std::vector<std::string>& feeds, FedMap* fed,
                          std::vector<Endpoint>* feed_order) {
  for (const std::string& f : feeds) {
    auto e = in.FindEndpoint(f);
    if (!e.ok()) return BadName("feed", f, e.status());
    const EndpointKey key{e->node->id(), e->index};
    if (fed->contains(key)) continue;
    std::string name = FeedNodeName(TensorName(*e));
    if (in.FindNode(name) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("feed '", f, "': the graph already has a node named '", name, "', the feed's placeholder"));
    }
    fed->emplace(key, std::move(name));
    feed_order->push_back(*e);
  }
  return absl::OkStatus();
}

// A fed Placeholder hands its control edges to its feed placeholder: the
// placeholder's name, or nullptr when `c` is not one.
const std::string* ControlReplacement(const FedMap& fed, const Node* c) {
  if (c->op() != "Placeholder") return nullptr;
  auto it = fed.find(EndpointKey{c->id(), 0});
  return it == fed.end() ? nullptr : &it->second;
}

// By node id: whether the fetches and targets need the node, walking
// inputs back to the fed endpoints.
absl::Status MarkNeeded(const Graph& in, const std::vector<std::string>& fetches,
                        const std::vector<std::string>& targets, const FedMap& fed, std::vector<bool>* keep) {
  keep->assign(in.num_nodes(), false);
  std::vector<const Node*> work;
  auto visit = [&](const Node* n) {
    if (!(*keep)[n->id()]) {
      (*keep)[n->id()] = true;
      work.push_back(n);
    }
  };
  for (const std::string& f : fetches) {
    auto e = in.FindEndpoint(f);
    if (!e.ok()) return BadName("fetch", f, e.status());
    if (!fed.contains(EndpointKey{e->node->id(), e->index})) visit(e->node);
  }
  for (const std::string& t : targets) {
    const Node* n = in.FindNode(t);
    if (n == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("target '", t, "' names no node in the graph (targets are node names, not tensors)"));
    }
    visit(n);
  }
  while (!work.empty()) {
    const Node* n = work.back();
    work.pop_back();
    for (const Endpoint& e : n->inputs()) {
      if (!fed.contains(EndpointKey{e.node->id(), e.index})) visit(e.node);
    }
    for (const Node* c : n->control_inputs()) {
      if (ControlReplacement(fed, c) == nullptr) visit(c);
    }
  }
  return absl::OkStatus();
}

// The pruned graph: a placeholder per fed endpoint, then the kept nodes
// reading the placeholders instead of what was fed.
absl::StatusOr<std::unique_ptr<Graph>> CopyKept(const Graph& in, const FedMap& fed,
                                                const std::vector<Endpoint>& feed_order,
                                                const std::vector<bool>& keep) {
  auto g = std::make_unique<Graph>();
  for (const Endpoint& e : feed_order) {
    NodeDef def;
    def.set_name(fed.at(EndpointKey{e.node->id(), e.index}));
    def.set_op("Placeholder");
    def.set_device(e.node->requested_device());
    (*def.mutable_attr())["dtype"] = Attr("dtype", e.node->output_type(e.index)).second;
    (*def.mutable_attr())["shape"] = Attr("shape", e.node->output_shape(e.index)).second;
    ASSIGN_OR_RETURN(Node * p, g->AddNode(std::move(def)));
    p->set_assigned_device(e.node->assigned_device());
  }
  for (const auto& n : in.nodes()) {
    if (!keep[n->id()]) continue;
    NodeDef def = n->def();
    def.clear_input();
    for (const Endpoint& e : n->inputs()) {
      auto it = fed.find(EndpointKey{e.node->id(), e.index});
      def.add_input(it == fed.end() ? TensorName(e) : it->second);
    }
    for (const Node* c : n->control_inputs()) {
      const std::string* r = ControlReplacement(fed, c);
      def.add_input(absl::StrCat("^", r == nullptr ? c->name() : *r));
    }
    auto added = g->AddNode(std::move(def));
    // Cannot fail for a valid input graph: same ops, inputs already added.
    if (!added.ok()) return Annotate(added.status(), "pruning");
    (*added)->set_assigned_device(n->assigned_device());
  }
  return g;
}

}  // namespace

std::string FeedNodeName(absl::string_view tensor_name) {
  std::string node;
  int index = 0;
  if (!ParseTensorName(tensor_name, &node, &index).ok() || index < 0) {
    return absl::StrCat("_feed/", tensor_name);
  }
  return absl::StrCat("_feed/", node, "_", index);
}

absl::Status PruneGraph(const Graph& in, const std::vector<std::string>& feeds,
                        const std::vector<std::string>& fetches, const std::vector<std::string>& targets,
                        std::unique_ptr<Graph>* out) {
  if (fetches.empty() && targets.empty()) {
    return absl::InvalidArgumentError("nothing to run: give at least one fetch or target");
  }
  FedMap fed;
  std::vector<Endpoint> feed_order;
  RETURN_IF_ERROR(CollectFeeds(in, feeds, &fed, &feed_order));
  std::vector<bool> keep;
  RETURN_IF_ERROR(MarkNeeded(in, fetches, targets, fed, &keep));
  ASSIGN_OR_RETURN(*out, CopyKept(in, fed, feed_order, keep));
  return absl::OkStatus();
}

}  // namespace weft
