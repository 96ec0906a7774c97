// PARAMETER_SERVER with sync (and CENTRAL_STORAGE, central_storage.cc):
// variables and their updates on the variable devices, spread by bytes;
// each update applies the mean of the N replicas' gradients once per step,
// and one `train` runs every update (master/strategy.h).
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "master/strategies/parameter_server_common.h"
#include "master/strategies/strategies.h"
#include "master/strategies/variables.h"

namespace weft {
namespace master {
namespace strategies {

absl::Status RewriteParameterServerSync(Rewrite* rw) {
  const std::map<std::string, std::string> device_of = SpreadVariables(*rw);
  const NameSet shared(rw->variables.begin(), rw->variables.end());
  rw->AddSharedVariables(device_of);
  for (int r = 0; r < rw->n; ++r) CopyReplicaBody(rw, r, shared, SharedRename(shared, r));
  NodeDef* train = rw->Add("train", "NoOp", rw->options.replica_devices[0], {});
  for (const Update& u : rw->updates) {
    const std::string& dev = device_of.at(u.vars[0]);
    std::vector<std::string> terms;
    for (int r = 0; r < rw->n; ++r) terms.push_back(ReplicaGradient(rw, u, r, SharedRename(shared, r), dev));
    const std::string mean = rw->Mean(absl::StrCat("aggregate/", u.node->name()), dev, terms);
    NodeDef* c = AddUpdate(rw, u.node->name(), u, dev);
    c->add_input(mean);
    for (int r = 0; r < rw->n; ++r) AddControlInputs(*rw, u, r, dev, SharedRename(shared, r), c);
    train->add_input("^" + u.node->name());
    rw->train_targets.push_back(u.node->name());
  }
  for (int r = 0; r < rw->n; ++r) rw->replica_train.push_back("train");
  rw->train_op = "train";
  rw->MeanLoss();
  return absl::OkStatus();
}

}  // namespace strategies
}  // namespace master
}  // namespace weft
