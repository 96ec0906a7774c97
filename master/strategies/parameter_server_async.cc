// PARAMETER_SERVER without sync: the variables on the ps as for sync, but
// each replica has its own update ops with its own gradient and its own
// train op, so replicas step at their own pace (master/strategy.h).
#include <map>
#include <string>

#include "master/strategies/parameter_server_common.h"
#include "master/strategies/strategies.h"
#include "master/strategies/variables.h"

namespace weft {
namespace master {
namespace strategies {

absl::Status RewriteParameterServerAsync(Rewrite* rw) {
  const std::map<std::string, std::string> device_of = SpreadVariables(*rw);
  const NameSet shared(rw->variables.begin(), rw->variables.end());
  rw->AddSharedVariables(device_of);
  for (int r = 0; r < rw->n; ++r) CopyReplicaBody(rw, r, shared, SharedRename(shared, r));
  for (int r = 0; r < rw->n; ++r) {
    const Rename rename = SharedRename(shared, r);
    NodeDef* train = rw->Add(ReplicaName(r, "train"), "NoOp", rw->options.replica_devices[r], {});
    std::vector<std::string> targets;
    for (const Update& u : rw->updates) {
      NodeDef* c = AddUpdate(rw, ReplicaName(r, u.node->name()), u, device_of.at(u.vars[0]));
      c->add_input(ReplicaGradient(rw, u, r, rename, device_of.at(u.vars[0])));
      AddControlInputs(*rw, u, r, device_of.at(u.vars[0]), rename, c);
      train->add_input("^" + c->name());
      targets.push_back(c->name());
    }
    rw->replica_train.push_back(train->name());
    rw->replica_targets.push_back(std::move(targets));
  }
  return absl::OkStatus();
}

}  // namespace strategies
}  // namespace master
}  // namespace weft
