// MasterSession's plans: for each signature, the pruned, placed and
// partitioned graph, registered with the tasks that run it.
#include "master/master_session.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "graph/fuse_transfers.h"
#include "graph/partition.h"
#include "graph/placer.h"
#include "graph/prune.h"
#include "master/master_session_internal.h"

namespace weft {
namespace master {
namespace {

using session_internal::Partition;
using session_internal::Plan;

std::string SignatureKey(const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
                         const std::vector<std::string>& targets) {
  return absl::StrCat(absl::StrJoin(feeds, "\x01"), "\x02", absl::StrJoin(fetches, "\x01"), "\x02",
                      absl::StrJoin(targets, "\x01"));
}

// Which partition of a plan being built holds a node of the pruned graph.
struct PartOfNode {
  const Graph* pruned;
  std::map<std::string, int> part_of_device;

  // -1 when pruning removed the node.
  int operator()(const std::string& node) const {
    const Node* n = pruned->FindNode(node);
    return n == nullptr ? -1 : part_of_device.at(n->assigned_device());
  }
};

void AddUnique(std::vector<std::string>* v, const std::string& s) {
  if (std::find(v->begin(), v->end(), s) == v->end()) v->push_back(s);
}

// Sends each fetch to the partition that holds it (a fed tensor is fetched
// from its placeholder) and each target to its partition.
absl::Status RouteFetchesAndTargets(const Graph& graph, const PartOfNode& part_of_node,
                                    const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
                                    const std::vector<std::string>& targets, Plan* plan) {
  std::set<std::string> fed;  // canonical tensor names
  for (const std::string& f : feeds) {
    ASSIGN_OR_RETURN(Endpoint e, graph.FindEndpoint(f));
    fed.insert(TensorName(e));
  }
  for (const std::string& f : fetches) {
    ASSIGN_OR_RETURN(Endpoint e, graph.FindEndpoint(f));
    std::string name = fed.count(TensorName(e)) > 0 ? FeedNodeName(f) : f;
    std::string node;
    int index = 0;
    RETURN_IF_ERROR(ParseTensorName(name, &node, &index));
    const int p = part_of_node(node);
    if (p < 0) return absl::InternalError(absl::StrCat("fetch '", f, "' was pruned away"));
    AddUnique(&plan->parts[p].fetches, name);
    plan->fetch_routes.emplace_back(p, name);
  }
  for (const std::string& t : targets) {
    const int p = part_of_node(t);
    if (p < 0) return absl::InternalError(absl::StrCat("target '", t, "' was pruned away"));
    AddUnique(&plan->parts[p].targets, t);
  }
  return absl::OkStatus();
}

// Removes the partitions with nothing to fetch or run and renumbers the
// fetch routes; returns each old partition's new index (-1: removed).
std::vector<int> DropIdlePartitions(Plan* plan) {
  std::vector<int> new_index(plan->parts.size(), -1);
  std::vector<Partition> kept;
  for (size_t i = 0; i < plan->parts.size(); ++i) {
    Partition& p = plan->parts[i];
    if (p.fetches.empty() && p.targets.empty()) continue;
    new_index[i] = static_cast<int>(kept.size());
    kept.push_back(std::move(p));
  }
  plan->parts = std::move(kept);
  for (auto& route : plan->fetch_routes) route.first = new_index[route.first];
  return new_index;
}

// Sends each feed to the partition of its placeholder; a feed nothing reads
// or fetches is not sent anywhere.
void RouteFeeds(const PartOfNode& part_of_node, const std::vector<int>& new_index,
                const std::vector<std::string>& feeds, Plan* plan) {
  std::set<std::string> fetched;
  for (const auto& route : plan->fetch_routes) fetched.insert(route.second);
  for (const std::string& f : feeds) {
    const std::string name = FeedNodeName(f);
    const Node* n = part_of_node.pruned->FindNode(name);
    const bool used = n != nullptr && (!n->out_edges().empty() || !n->control_outputs().empty() ||
                                       fetched.count(name) > 0);
    const int old = used ? part_of_node(name) : -1;
    const int p = old < 0 ? -1 : new_index[old];
    if (p >= 0) AddUnique(&plan->parts[p].feeds, name);
    plan->feed_routes.emplace_back(p, name);
  }
}

}  // namespace

std::shared_ptr<const MasterSession::Plan> MasterSession::BuiltPlan(const std::vector<std::string>& feeds,
                                                                   const std::vector<std::string>& fetches,
                                                                   const std::vector<std::string>& targets) const {
  const std::string key = SignatureKey(feeds, fetches, targets);
  absl::MutexLock lock(&mu_);
  auto it = plans_.find(key);
  if (it == plans_.end() || !it->second->ready.HasBeenNotified()) return nullptr;
  return it->second->plan;  // null when building it failed
}

absl::StatusOr<std::shared_ptr<const MasterSession::Plan>> MasterSession::GetPlan(
    const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets) {
  const std::string key = SignatureKey(feeds, fetches, targets);
  std::shared_ptr<PlanEntry> entry;
  std::shared_ptr<const Graph> graph;
  {
    absl::MutexLock lock(&mu_);
    auto it = plans_.find(key);
    if (it != plans_.end()) {
      entry = it->second;
    } else {
      entry = std::make_shared<PlanEntry>();
      plans_.emplace(key, entry);
      graph = graph_;
    }
  }
  if (graph == nullptr) {  // another caller builds it
    entry->ready.WaitForNotification();
    if (!entry->status.ok()) return entry->status;
    return entry->plan;
  }
  absl::StatusOr<std::shared_ptr<Plan>> plan = BuildPlan(*graph, feeds, fetches, targets);
  if (plan.ok()) {
    absl::Status s = Register(plan->get());
    if (!s.ok()) plan = s;
  }
  if (plan.ok()) {
    entry->plan = *std::move(plan);
  } else {
    entry->status = plan.status();
    absl::MutexLock lock(&mu_);
    plans_.erase(key);  // a later call may succeed (e.g. after Extend)
  }
  entry->ready.Notify();
  if (!entry->status.ok()) return entry->status;
  return entry->plan;
}

absl::StatusOr<std::shared_ptr<MasterSession::Plan>> MasterSession::BuildPlan(
    const Graph& graph, const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets) {
  std::unique_ptr<Graph> pruned;
  RETURN_IF_ERROR(PruneGraph(graph, feeds, fetches, targets, &pruned));
  RETURN_IF_ERROR(PlaceGraph(pruned.get(), devices_, default_device_));
  ASSIGN_OR_RETURN(auto parts, PartitionGraph(*pruned));
  // One message per (task pair, point of the step) instead of one RPC per
  // tensor: see graph/fuse_transfers.h.
  RETURN_IF_ERROR(FuseCrossTaskTransfers(*pruned, &parts).status());

  auto plan = std::make_shared<Plan>();
  PartOfNode part_of_node{pruned.get(), {}};
  for (auto& [device, def] : parts) {
    Partition p;
    p.device = device;
    p.task = device_task_.at(device);  // placement only uses devices_
    p.worker = workers_->GetOrCreateWorker(p.task);
    if (p.worker == nullptr) return absl::InternalError(absl::StrCat("no client for task ", p.task));
    for (const NodeDef& n : def.node()) {
      if (n.op() == "_Send") p.targets.push_back(n.name());
    }
    p.graph_def = std::move(def);
    part_of_node.part_of_device[device] = static_cast<int>(plan->parts.size());
    plan->parts.push_back(std::move(p));
  }
  RETURN_IF_ERROR(RouteFetchesAndTargets(graph, part_of_node, feeds, fetches, targets, plan.get()));
  // A partition with nothing to fetch, run or send does no useful work
  // (only an unused feed's placeholder lands in one); leave it out.
  const std::vector<int> new_index = DropIdlePartitions(plan.get());
  RouteFeeds(part_of_node, new_index, feeds, plan.get());
  std::set<std::string> tasks;
  for (const Partition& p : plan->parts) {
    const bool first = tasks.insert(p.task).second;
    if (first) plan->tasks.push_back(p.task);
    plan->carries_cleanup.push_back(first);
  }
  return plan;
}

absl::Status MasterSession::Register(Plan* plan) {
  const size_t n = plan->parts.size();
  std::vector<RegisterGraphRequest> requests(n);
  std::vector<RegisterGraphResponse> responses(n);
  std::vector<absl::Status> statuses(n);
  // Every task learns its peers' addresses from the master, before its
  // graph can pull from them (tasks started on port 0 know no others).
  const ClusterDef cluster = workers_->cluster();
  for (size_t i = 0; i < n; ++i) {
    Partition& p = plan->parts[i];
    RegisterGraphRequest& r = requests[i];
    r.set_session_handle(handle_);
    r.set_master_incarnation(options_.master_incarnation);
    if (cluster.job_size() > 0) *r.mutable_cluster() = cluster;
    *r.mutable_graph_def() = std::move(p.graph_def);
    for (const std::string& f : p.feeds) r.add_feed(f);
    for (const std::string& f : p.fetches) r.add_fetch(f);
    for (const std::string& t : p.targets) r.add_target(t);
    p.graph_def.Clear();
  }
  absl::BlockingCounter pending(static_cast<int>(n));
  for (size_t i = 0; i < n; ++i) {
    plan->parts[i].worker->RegisterGraphAsync(&requests[i], &responses[i], [&, i](const absl::Status& s) {
      statuses[i] = s;
      pending.DecrementCount();
    });
  }
  pending.Wait();
  absl::Status first;
  for (size_t i = 0; i < n; ++i) {
    if (statuses[i].ok()) {
      plan->parts[i].graph_handle = responses[i].graph_handle();
    } else if (first.ok()) {
      first = WithTask(statuses[i], plan->parts[i].task);
    }
  }
  if (!first.ok()) {
    Deregister(*plan).IgnoreError();  // best effort: `first` says what went wrong
    return first;
  }
  Logger("master")->debug("session {}: registered {} partition(s) on {}", handle_, n,
                          absl::StrJoin(plan->tasks, ", "));
  return absl::OkStatus();
}

absl::Status MasterSession::Deregister(const Plan& plan) {
  std::vector<int> registered;
  for (size_t i = 0; i < plan.parts.size(); ++i) {
    if (!plan.parts[i].graph_handle.empty()) registered.push_back(static_cast<int>(i));
  }
  std::vector<DeregisterGraphRequest> requests(registered.size());
  std::vector<DeregisterGraphResponse> responses(registered.size());
  std::vector<absl::Status> statuses(registered.size());
  absl::BlockingCounter pending(static_cast<int>(registered.size()));
  for (size_t k = 0; k < registered.size(); ++k) {
    const Partition& p = plan.parts[registered[k]];
    requests[k].set_session_handle(handle_);
    requests[k].set_graph_handle(p.graph_handle);
    p.worker->DeregisterGraphAsync(&requests[k], &responses[k], [&, k](const absl::Status& s) {
      statuses[k] = s;
      pending.DecrementCount();
    });
  }
  pending.Wait();
  for (size_t k = 0; k < registered.size(); ++k) {
    RETURN_IF_ERROR(WithTask(statuses[k], plan.parts[registered[k]].task));
  }
  return absl::OkStatus();
}

}  // namespace master
}  // namespace weft
