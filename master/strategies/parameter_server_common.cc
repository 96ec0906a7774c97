#include "master/strategies/parameter_server_common.h"

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/string_view.h"
#include "graph/attr.h"
#include "graph/graph.h"

namespace weft {
namespace master {
namespace strategies {

Rename SharedRename(const NameSet& shared, int r) {
  // `shared` outlives the rewrite step that uses the function.
  return [r, &shared](const std::string& s) { return shared.contains(s) ? s : ReplicaName(r, s); };
}

void CopyReplicaBody(Rewrite* rw, int r, const NameSet& shared, const Rename& rename) {
  for (const NodeDef& nd : rw->in_def.node()) {
    if (shared.contains(nd.name()) || rw->update_names.contains(nd.name()) || nd.name() == rw->training.train_op) {
      continue;
    }
    rw->Copy(nd, r, rename);
  }
}

NodeDef* AddUpdate(Rewrite* rw, const std::string& name, const Update& u, const std::string& device) {
  NodeDef* c = rw->out_def.add_node();
  c->set_name(name);
  c->set_op(u.node->op());
  c->set_device(device);
  *c->mutable_attr() = u.node->attr();
  for (int i = 0; i < u.grad_input; ++i) c->add_input(u.node->input(i));
  return c;
}

std::string ReplicaGradient(Rewrite* rw, const Update& u, int r, const Rename& rename,
                            const std::string& var_device) {
  const std::string dense = RenameInputNode(u.grad, rename);
  const std::string replica = rw->options.replica_devices[r];
  // Whether `tensor` is output 0 of node `name`.
  auto first_output = [](const std::string& tensor, const std::string& name) {
    return tensor == name || tensor == name + ":0";
  };
  auto it = rw->by_name.find(InputNodeName(u.grad));
  if (it == rw->by_name.end() || it->second->op() != "EmbeddingGrad" || !first_output(u.grad, it->first) ||
      TaskOf(replica) == TaskOf(var_device)) {
    return dense;
  }
  const NodeDef& grad = *it->second;
  // Only the table itself: a row-sharded one reaches EmbeddingGrad stacked back.
  if (grad.input_size() != 3 || !first_output(grad.input(2), u.vars[0])) return dense;
  auto table = rw->by_name.find(u.vars[0]);
  absl::StatusOr<TensorShape> shape = GetShapeAttr(*table->second, "shape");
  if (!shape.ok() || shape->rank() != 2 || shape->dim(0) < 0) return dense;
  const std::string cpu = OnGpu(replica) ? TaskOf(replica) + "/device:CPU:0" : replica;
  NodeDef* rows = rw->Add(ReplicaName(r, grad.name() + "/rows"), "EmbeddingGradRows", cpu,
                          {RenameInputNode(grad.input(0), rename), RenameInputNode(grad.input(1), rename)});
  Rewrite::SetAttr(rows, Attr("num_rows", shape->dim(0)));
  rw->Add(ReplicaName(r, grad.name() + "/scattered"), "ScatterRows", var_device,
          {rows->name(), rows->name() + ":1", u.vars[0]});
  return ReplicaName(r, grad.name() + "/scattered");
}

namespace {

// "name" of "^name", "name:1" or "name".
absl::string_view NodeOf(absl::string_view input) {
  absl::ConsumePrefix(&input, "^");
  return input.substr(0, input.find(':'));
}

bool Reads(const NodeDef& n, absl::string_view var) {
  for (const std::string& in : n.input()) {
    if (!absl::StartsWith(in, "^") && NodeOf(in) == var) return true;
  }
  return false;
}

// What `tensor` depends on in rw.in_def: its node's ancestors (itself
// included), and the nodes they read directly.
struct Before {
  absl::flat_hash_set<absl::string_view> nodes;
  absl::flat_hash_set<absl::string_view> read;
};

Before BeforeTensor(const Rewrite& rw, absl::string_view tensor) {
  Before b;
  std::vector<absl::string_view> stack = {NodeOf(tensor)};
  while (!stack.empty()) {
    const absl::string_view name = stack.back();
    stack.pop_back();
    if (!b.nodes.insert(name).second) continue;
    auto it = rw.by_name.find(name);
    if (it == rw.by_name.end()) continue;
    for (const std::string& in : it->second->input()) {
      stack.push_back(NodeOf(in));
      if (!absl::StartsWith(in, "^")) b.read.insert(NodeOf(in));
    }
  }
  return b;
}

}  // namespace

void AddControlInputs(const Rewrite& rw, const Update& u, int r, const std::string& var_device,
                      const Rename& rename, NodeDef* out) {
  const std::string replica_task = TaskOf(rw.options.replica_devices[r]);
  const bool transferred = !replica_task.empty() && replica_task != TaskOf(var_device);
  std::optional<Before> before;
  for (const std::string& in : u.node->input()) {
    if (!absl::StartsWith(in, "^")) continue;
    if (!before.has_value()) before = BeforeTensor(rw, u.grad);
    const absl::string_view reader = NodeOf(in);
    if (before->nodes.contains(reader)) continue;  // the gradient waits for it
    auto it = rw.by_name.find(reader);
    bool follows_transfer = false;
    for (const std::string& var : u.vars) {
      if (!transferred || it == rw.by_name.end()) break;
      follows_transfer |= Reads(*it->second, var) && before->read.contains(var);
    }
    if (follows_transfer) continue;  // it reads the copy the gradient's reads read
    out->add_input(RenameInputNode(in, rename));
  }
}

}  // namespace strategies
}  // namespace master
}  // namespace weft
