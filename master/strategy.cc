// ApplyStrategy: checks the options, then runs the strategy's rewrite
// (master/strategies/, one file per strategy, on the shared kit of
// master/strategies/rewrite.h).
#include "master/strategy.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "job/strategy_spec.h"
#include "master/strategies/cross_replica.h"
#include "master/strategies/rewrite.h"
#include "master/strategies/strategies.h"
#include "master/strategies/variables.h"

namespace weft {
namespace master {
namespace {

using strategies::Rewrite;

// The kind is a distribution strategy with the devices it needs.
absl::Status CheckKindAndDevices(const StrategyOptions& options) {
  switch (options.kind) {
    case StrategySpec::MULTI_WORKER_MIRRORED:
    case StrategySpec::MIRRORED:
      break;
    case StrategySpec::PARAMETER_SERVER:
    case StrategySpec::CENTRAL_STORAGE:
      if (options.variable_devices.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("strategy ", StrategySpec::Kind_Name(options.kind),
                                                       " needs at least one device for its variables"));
      }
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("strategy ", StrategySpec::Kind_Name(options.kind), " is not a distribution strategy"));
  }
  if (options.replica_devices.empty()) return absl::InvalidArgumentError("strategy: no replica devices");
  return absl::OkStatus();
}

// The spec-only rules come from job/strategy_spec.h, shared with
// ValidateJob; what depends on the devices is checked here.
absl::Status CheckOptions(const StrategyOptions& options) {
  RETURN_IF_ERROR(CheckKindAndDevices(options));
  const int n = static_cast<int>(options.replica_devices.size());
  RETURN_IF_ERROR(CheckStrategyKinds(options.kind, options.sync, options.replicas_to_aggregate, StrategySpec::AUTO));
  RETURN_IF_ERROR(CheckReplicasToAggregate(options.kind, options.replicas_to_aggregate, n));
  RETURN_IF_ERROR(CheckStrategyKinds(options.kind, options.sync, 0, options.cross_device_ops));
  if (options.cross_device_ops == StrategySpec::NCCL && n > 1 && !strategies::LocalNccl(options)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "strategy: cross_device_ops NCCL needs every replica on a GPU of its own, but the replicas are on ",
        absl::StrJoin(options.replica_devices, ", ")));
  }
  if (options.kind == StrategySpec::MULTI_WORKER_MIRRORED) {
    std::set<std::string> tasks;
    for (const std::string& d : options.replica_devices) tasks.insert(strategies::TaskOf(d));
    if (tasks.size() != options.replica_devices.size()) {
      return absl::InvalidArgumentError(
          "MULTI_WORKER_MIRRORED runs one replica per task; use MIRRORED for several devices of one task");
    }
  }
  return absl::OkStatus();
}

absl::Status RunRewrite(Rewrite* rw) {
  switch (rw->options.kind) {
    case StrategySpec::MULTI_WORKER_MIRRORED:
      return strategies::RewriteMultiWorkerMirrored(rw);
    case StrategySpec::MIRRORED:
      return strategies::RewriteMirrored(rw);
    case StrategySpec::PARAMETER_SERVER:
      RETURN_IF_ERROR(strategies::ShardLargeVariables(rw));
      if (rw->options.replicas_to_aggregate > 0) return strategies::RewriteParameterServerAccumulated(rw);
      return rw->options.sync ? strategies::RewriteParameterServerSync(rw)
                              : strategies::RewriteParameterServerAsync(rw);
    case StrategySpec::CENTRAL_STORAGE:
      return strategies::RewriteCentralStorage(rw);
    default:
      // CheckOptions refused every other kind.
      return absl::InternalError(
          absl::StrCat("strategy ", StrategySpec::Kind_Name(rw->options.kind), " has no rewrite"));
  }
}

// The strategy's rewrite, then the sums across replicas it left.
absl::Status RunStrategy(Rewrite* rw) {
  RETURN_IF_ERROR(RunRewrite(rw));
  const StrategyOptions& o = rw->options;
  const bool lockstep = o.kind != StrategySpec::PARAMETER_SERVER || (o.sync && o.replicas_to_aggregate == 0);
  return strategies::CrossReplicaSumsOnFirstDevice(rw, lockstep);
}

}  // namespace

std::string ReplicaName(int r, const std::string& name) { return absl::StrCat("replica_", r, "/", name); }

std::vector<std::string> ReplicaTargets(const ReplicaNames& names) {
  return names.train_targets.empty() ? std::vector<std::string>{names.train_op} : names.train_targets;
}

absl::StatusOr<ReplicatedGraph> ApplyStrategy(const TrainingGraph& training, const StrategyOptions& options) {
  if (training.graph == nullptr) return absl::InvalidArgumentError("strategy: no training graph");
  RETURN_IF_ERROR(CheckOptions(options));
  Rewrite rw(training, options);
  RETURN_IF_ERROR(rw.Load());
  RETURN_IF_ERROR(RunStrategy(&rw));
  return rw.Finish();
}

}  // namespace master
}  // namespace weft
