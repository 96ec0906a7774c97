// The distribution strategy's settings as the job states them: which
// settings each kind takes, checked once here for the CLI, the master's
// Submit (through ValidateJob), the planner and the strategy rewrites.
//
// Messages have the form "strategy KIND ..." (or "strategy: setting ...");
// callers prefix where they come from ("job: ", "job 'name': ").
//
// Thread-safety: pure functions.
#ifndef WEFT_JOB_STRATEGY_SPEC_H_
#define WEFT_JOB_STRATEGY_SPEC_H_

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace weft {

// replicas_to_aggregate is for PARAMETER_SERVER with sync only.
bool TakesReplicasToAggregate(StrategySpec::Kind kind, bool sync);

// The settings of a distribution strategy (kind != NONE) that need no
// cluster: replicas_to_aggregate set only for sync PARAMETER_SERVER,
// cross_device_ops other than AUTO only for MIRRORED. INVALID_ARGUMENT
// naming the setting and the kind.
absl::Status CheckStrategyKinds(StrategySpec::Kind kind, bool sync, int replicas_to_aggregate,
                                StrategySpec::CrossDeviceOps cross_device_ops);

// replicas_to_aggregate against the number of replicas the cluster gives
// the strategy: 0 (all, in lockstep) or 1 to num_replicas. INVALID_ARGUMENT
// "strategy KIND has replicas_to_aggregate k but n replicas; ...".
absl::Status CheckReplicasToAggregate(StrategySpec::Kind kind, int replicas_to_aggregate, int num_replicas);

// Every spec-only check of job.strategy(), messages prefixed "job: ":
// steps_per_execution > 1 needs a distribution strategy and is not
// supported with replicas_to_aggregate (UNIMPLEMENTED), then
// CheckStrategyKinds for a distribution strategy; a job without a strategy
// may not set replicas_to_aggregate and ignores the other settings, as it
// always has.
// steps_in_flight outside 0..kMaxStepsInFlight is INVALID_ARGUMENT.
absl::Status ValidateStrategySpec(const JobSpec& job);
inline constexpr int kMaxStepsInFlight = 8;

}  // namespace weft

#endif  // WEFT_JOB_STRATEGY_SPEC_H_
