#include "master/strategies/cross_replica.h"

#include <functional>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace weft {
namespace master {
namespace strategies {
namespace {

// "name" of "^name", "name:1" or "name".
absl::string_view NodeOf(absl::string_view input) {
  absl::ConsumePrefix(&input, "^");
  return input.substr(0, input.find(':'));
}

// Replica r's copies of the one-replica graph's CrossReplicaSums, [sum][r].
std::vector<std::vector<NodeDef*>> Copies(Rewrite* rw) {
  std::vector<std::vector<NodeDef*>> out;
  for (const NodeDef& nd : rw->in_def.node()) {
    if (nd.op() != "CrossReplicaSum") continue;
    std::vector<NodeDef*> copies;
    for (int r = 0; r < rw->n; ++r) copies.push_back(rw->FindOut(ReplicaName(r, nd.name())));
    out.push_back(std::move(copies));
  }
  return out;
}

}  // namespace

void CrossReplicaAllReduces(Rewrite* rw, Reduction how) {
  int64_t instance = rw->num_buckets + 1;
  for (const std::vector<NodeDef*>& copies : Copies(rw)) {
    for (NodeDef* c : copies) {
      if (c == nullptr) continue;  // every mirrored replica copies every node
      c->set_op("CollectiveAllReduce");
      SetGroupAttrs(rw, how, instance, /*mean=*/false, c);
    }
    ++instance;
  }
}

absl::Status CrossReplicaSumsOnFirstDevice(Rewrite* rw, bool lockstep) {
  if (rw->n == 1) return absl::OkStatus();
  for (const std::vector<NodeDef*>& copies : Copies(rw)) {
    NodeDef* first = copies[0];
    if (first == nullptr || first->op() != "CrossReplicaSum") continue;  // none, or an all-reduce already
    const std::string name(absl::StripPrefix(first->name(), ReplicaName(0, "")));
    if (!lockstep) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": sums across replicas (a synchronized batch_norm) need replicas that take their steps together; "
                "asynchronous and replicas_to_aggregate PARAMETER_SERVER replicas do not"));
    }
    for (int i = 0; i < first->input_size(); ++i) {
      if (absl::StartsWith(first->input(i), "^")) continue;
      std::vector<std::string> terms;
      for (NodeDef* c : copies) {
        if (c == nullptr) return absl::InternalError(absl::StrCat(name, " is missing from a replica"));
        terms.push_back(c->input(i));
      }
      const std::string sum = absl::StrCat("cross_replica/", name, "/", i);
      rw->Add(sum, "AddN", rw->options.replica_devices[0], std::move(terms));
      for (NodeDef* c : copies) c->set_input(i, sum);
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> DataflowOrder(const Rewrite& rw, const std::vector<std::string>& collectives) {
  const std::string prefix = ReplicaName(0, "");
  std::vector<const NodeDef*> nodes;
  absl::flat_hash_map<absl::string_view, int> index;
  for (const NodeDef& nd : rw.out_def.node()) {
    if (!absl::StartsWith(nd.name(), prefix)) continue;
    index[nd.name()] = static_cast<int>(nodes.size());
    nodes.push_back(&nd);
  }
  absl::flat_hash_map<int, int64_t> key;  // node -> instance_key, for the collectives
  for (const std::string& c : collectives) {
    auto it = index.find(c);
    if (it != index.end()) key[it->second] = GetIntAttr(*nodes[it->second], "instance_key").value_or(0);
  }
  std::vector<int> pending(nodes.size(), 0);
  std::vector<std::vector<int>> consumers(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const std::string& in : nodes[i]->input()) {
      auto it = index.find(NodeOf(in));
      if (it == index.end()) continue;
      ++pending[i];
      consumers[it->second].push_back(static_cast<int>(i));
    }
  }
  // Kahn's algorithm: everything else that is ready runs before a ready
  // collective, and of those the highest instance goes first.
  std::priority_queue<int, std::vector<int>, std::greater<int>> work;
  std::priority_queue<std::pair<int64_t, int>> ready;
  auto push = [&](int i) {
    auto k = key.find(i);
    if (k == key.end()) {
      work.push(i);
    } else {
      ready.push({k->second, i});
    }
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (pending[i] == 0) push(static_cast<int>(i));
  }
  std::vector<std::string> order;
  while (!work.empty() || !ready.empty()) {
    int i;
    if (!work.empty()) {
      i = work.top();
      work.pop();
    } else {
      i = ready.top().second;
      ready.pop();
      order.push_back(nodes[i]->name());
    }
    for (int c : consumers[i]) {
      if (--pending[c] == 0) push(c);
    }
  }
  return order;
}

}  // namespace strategies
}  // namespace master
}  // namespace weft
