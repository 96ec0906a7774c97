#include "master/strategies/parameter_server_common.h"

#include "absl/strings/match.h"

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

void AddControlInputs(const NodeDef& update, const Rename& rename, NodeDef* out) {
  for (const std::string& in : update.input()) {
    if (absl::StartsWith(in, "^")) out->add_input(RenameInputNode(in, rename));
  }
}

}  // namespace strategies
}  // namespace master
}  // namespace weft
