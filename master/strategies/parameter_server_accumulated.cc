// PARAMETER_SERVER with sync and replicas_to_aggregate k: the variables on
// the ps, free-running replicas, and the ps applying the mean of the first
// k current gradients once per global step (master/strategy.h,
// runtime/kernels/accumulator.h). Per replica: its accumulator-step reads, ordered reads
// of the variables, its pushes and its train op.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "master/strategies/parameter_server_common.h"
#include "master/strategies/strategies.h"
#include "master/strategies/variables.h"

namespace weft {
namespace master {
namespace strategies {
namespace {

absl::Status CheckAccumulatedOps(const Rewrite& rw) {
  for (const Update& u : rw.updates) {
    const std::string& op = u.node->op();
    if (op != "ApplyGradientDescent" && op != "ApplyMomentum" && op != "ApplyAdam") {
      return absl::InvalidArgumentError(absl::StrCat("strategy: replicas_to_aggregate supports the sgd, momentum "
                                                     "and adam updates, not '", u.node->name(), "' (", op, ")"));
    }
    // The accumulated applies take the plain forms' inputs; SGD and momentum
    // count their updates only for a learning-rate schedule.
    const int plain = op == "ApplyAdam" ? 4 : op == "ApplyMomentum" ? 2 : 1;
    if (u.grad_input != plain) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strategy: replicas_to_aggregate does not support a learning-rate schedule with the sgd or momentum "
          "optimizer (update '", u.node->name(), "'); use adam or adamw, whose schedule it follows"));
    }
  }
  return absl::OkStatus();
}

std::string StepNode(int r, const Update& u) { return ReplicaName(r, u.node->name() + "/local_step"); }

// What one replica's rewrite reads from the rest.
struct Shared {
  const std::map<std::string, std::string>& device_of;
  const NameSet& variables;
  const absl::flat_hash_map<std::string, const Update*>& update_of;  // variable -> the update writing it
};

// Replica r's pushes and train op; appends its push outcomes.
void AddPushes(Rewrite* rw, int r, const Shared& sh, const Rename& rename) {
  const int64_t k = rw->options.replicas_to_aggregate;
  NodeDef* train = rw->Add(ReplicaName(r, "train"), "NoOp", rw->options.replica_devices[r], {});
  std::vector<std::string> outcomes;
  std::vector<std::string> targets;
  for (const Update& u : rw->updates) {
    NodeDef* c =
        rw->Add(ReplicaName(r, u.node->name()), "Accumulate" + u.node->op(), sh.device_of.at(u.vars[0]), {});
    *c->mutable_attr() = u.node->attr();
    Rewrite::SetAttr(c, Attr("accumulator", u.node->name()));
    Rewrite::SetAttr(c, Attr("num_required", k));
    for (int i = 0; i < u.grad_input; ++i) c->add_input(u.node->input(i));
    c->add_input(RenameInputNode(u.grad, rename));
    c->add_input(StepNode(r, u));
    AddControlInputs(*rw, u, r, sh.device_of.at(u.vars[0]), rename, c);
    train->add_input("^" + c->name());
    targets.push_back(c->name());
    outcomes.push_back(c->name() + ":1");
  }
  rw->replica_train.push_back(train->name());
  rw->replica_targets.push_back(std::move(targets));
  rw->push_outcomes.push_back(std::move(outcomes));
}

void AddReplica(Rewrite* rw, int r, const Shared& sh) {
  const int64_t k = rw->options.replicas_to_aggregate;
  for (const Update& u : rw->updates) {
    NodeDef* step = rw->Add(StepNode(r, u), "AccumulatorStep", sh.device_of.at(u.vars[0]), {});
    Rewrite::SetAttr(step, Attr("accumulator", u.node->name()));
    Rewrite::SetAttr(step, Attr("num_required", k));
  }
  // A trained variable is read through an Identity on its ps that runs
  // after the replica read its accumulator's step, so the step a gradient
  // carries is never newer than the weights it was computed on.
  std::set<std::string> reads;
  const Rename rename = [&](const std::string& s) {
    if (!sh.variables.contains(s)) return ReplicaName(r, s);
    if (!sh.update_of.contains(s)) return s;
    reads.insert(s);
    return ReplicaName(r, "sync/" + s);
  };
  CopyReplicaBody(rw, r, sh.variables, rename);
  for (const std::string& v : reads) {
    rw->Add(ReplicaName(r, "sync/" + v), "Identity", sh.device_of.at(v), {v, "^" + StepNode(r, *sh.update_of.at(v))});
  }
  AddPushes(rw, r, sh, rename);
}

}  // namespace

absl::Status RewriteParameterServerAccumulated(Rewrite* rw) {
  absl::Status ops = CheckAccumulatedOps(*rw);
  if (!ops.ok()) return ops;
  const std::map<std::string, std::string> device_of = SpreadVariables(*rw);
  const NameSet shared(rw->variables.begin(), rw->variables.end());
  absl::flat_hash_map<std::string, const Update*> update_of;
  for (const Update& u : rw->updates) {
    for (const std::string& v : u.vars) update_of[v] = &u;
  }
  rw->AddSharedVariables(device_of);
  const Shared sh{device_of, shared, update_of};
  for (int r = 0; r < rw->n; ++r) AddReplica(rw, r, sh);
  return absl::OkStatus();
}

}  // namespace strategies
}  // namespace master
}  // namespace weft
