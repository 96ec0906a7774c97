#include "job/strategy_spec.h"

#include "absl/strings/str_cat.h"

namespace weft {

bool TakesReplicasToAggregate(StrategySpec::Kind kind, bool sync) {
  return kind == StrategySpec::PARAMETER_SERVER && sync;
}

absl::Status CheckStrategyKinds(StrategySpec::Kind kind, bool sync, int replicas_to_aggregate,
                                StrategySpec::CrossDeviceOps cross_device_ops) {
  if (replicas_to_aggregate != 0 && !TakesReplicasToAggregate(kind, sync)) {
    return absl::InvalidArgumentError(absl::StrCat("strategy ", StrategySpec::Kind_Name(kind),
                                                   " does not take replicas_to_aggregate (", replicas_to_aggregate,
                                                   "): it applies to kind PARAMETER_SERVER with sync: true only"));
  }
  if (cross_device_ops != StrategySpec::AUTO && kind != StrategySpec::MIRRORED) {
    return absl::InvalidArgumentError(absl::StrCat("strategy: cross_device_ops ",
                                                   StrategySpec::CrossDeviceOps_Name(cross_device_ops),
                                                   " is for MIRRORED, not ", StrategySpec::Kind_Name(kind)));
  }
  return absl::OkStatus();
}

absl::Status CheckReplicasToAggregate(StrategySpec::Kind kind, int replicas_to_aggregate, int num_replicas) {
  if (replicas_to_aggregate >= 0 && replicas_to_aggregate <= num_replicas) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "strategy ", StrategySpec::Kind_Name(kind), " has replicas_to_aggregate ", replicas_to_aggregate, " but ",
      num_replicas, " replicas; use 1 to ", num_replicas,
      " (the first k of them per step), or 0 for all in lockstep"));
}

absl::Status ValidateStrategySpec(const JobSpec& job) {
  const StrategySpec& spec = job.strategy();
  if (spec.steps_per_execution() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("job: strategy.steps_per_execution ", spec.steps_per_execution(),
                                                   " is negative; use 1 or more, or 0 to let the master choose"));
  }
  if (spec.steps_in_flight() < 0 || spec.steps_in_flight() > kMaxStepsInFlight) {
    return absl::InvalidArgumentError(absl::StrCat("job: strategy.steps_in_flight ", spec.steps_in_flight(),
                                                   " is out of range: 1 to ", kMaxStepsInFlight,
                                                   " dispatches, or 0 for the default (2)"));
  }
  if (spec.steps_per_execution() > 1) {
    // Several steps per dispatch need replicas that read their own input.
    if (spec.kind() == StrategySpec::NONE) {
      return absl::UnimplementedError(
          "job: strategy.steps_per_execution > 1 needs a distribution strategy (replicas that read their own data)");
    }
    if (spec.replicas_to_aggregate() > 0) {
      // A job step is a global step there, seen in each step's push outcomes.
      return absl::UnimplementedError(absl::StrCat(
          "job: strategy.steps_per_execution ", spec.steps_per_execution(),
          " is not supported with strategy.replicas_to_aggregate ", spec.replicas_to_aggregate(),
          " (k-of-N replicas run one step per dispatch)"));
    }
  }
  if (spec.kind() == StrategySpec::NONE) {
    // Moved from the master's undistributed run, which found it only once
    // the job had started.
    if (spec.replicas_to_aggregate() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job: strategy replicas_to_aggregate ", spec.replicas_to_aggregate(),
          " applies to kind PARAMETER_SERVER with sync: true only, and the job has no strategy kind"));
    }
    return absl::OkStatus();
  }
  absl::Status s = CheckStrategyKinds(spec.kind(), spec.sync(), spec.replicas_to_aggregate(), spec.cross_device_ops());
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("job: ", s.message()));
  return absl::OkStatus();
}

}  // namespace weft
