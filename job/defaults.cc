#include "job/defaults.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace weft {

RecoverySettings EffectiveRecovery(const RecoveryPolicy& policy) {
  RecoverySettings r;
  r.heartbeat_interval = absl::Milliseconds(policy.heartbeat_ms() > 0 ? policy.heartbeat_ms() : kDefaultHeartbeatMs);
  r.heartbeat_timeout = absl::Milliseconds(policy.heartbeat_timeout_ms() > 0 ? policy.heartbeat_timeout_ms()
                                                                             : kDefaultHeartbeatTimeoutMs);
  r.task_wait = absl::Seconds(policy.task_wait_seconds() > 0 ? policy.task_wait_seconds() : kDefaultTaskWaitSeconds);
  // -1: no recovery at all, the first failure ends the job.
  r.max_restarts = policy.max_restarts() == 0 ? kDefaultMaxRestarts : std::max(0, policy.max_restarts());
  return r;
}

RecoverySettings EffectiveRecovery(const JobSpec& job) { return EffectiveRecovery(job.recovery()); }

int EffectiveCheckpointKeep(const CheckpointPolicy& policy) {
  return policy.keep() > 0 ? policy.keep() : kDefaultCheckpointKeep;
}

int64_t EffectiveFusionBytes(const StrategySpec& spec) {
  return spec.fusion_bytes() > 0 ? spec.fusion_bytes() : kDefaultFusionBytes;
}

bool EffectiveSync(const StrategySpec& spec) { return spec.kind() != StrategySpec::PARAMETER_SERVER || spec.sync(); }

int EffectiveNumDevices(const StrategySpec& spec, int local_devices, int local_gpus) {
  if (spec.num_devices() > 0) return spec.num_devices();
  return local_gpus > 0 ? local_gpus : local_devices;
}

int EffectiveMinWorkers(const ElasticPolicy& policy) { return std::max(1, policy.min_workers()); }

int ElasticReplicaCount(const JobSpec& job, int live_workers) {
  const ElasticPolicy& e = job.elastic();
  int n = live_workers;
  if (e.max_workers() > 0) n = std::min(n, e.max_workers());
  for (; n >= EffectiveMinWorkers(e); --n) {
    if (job.batch_size() % n == 0) return n;
  }
  return 0;
}

absl::Duration ElasticWait(const JobSpec& job) {
  const int s = job.elastic().wait_seconds();
  if (s < 0) return absl::ZeroDuration();
  return s > 0 ? absl::Seconds(s) : EffectiveRecovery(job).task_wait;
}

absl::StatusOr<int64_t> ReplicaBatch(const JobSpec& job, int num_replicas) {
  const std::string kind = StrategySpec::Kind_Name(job.strategy().kind());
  if (num_replicas < 1) {
    return absl::InvalidArgumentError(absl::StrCat("strategy ", kind, " has no replicas to split batch_size ",
                                                   job.batch_size(), " over"));
  }
  if (job.batch_size() % num_replicas != 0) {
    return absl::InvalidArgumentError(absl::StrCat("strategy ", kind, " splits batch_size ", job.batch_size(),
                                                   " over ", num_replicas, " replicas; make it a multiple of ",
                                                   num_replicas));
  }
  return static_cast<int64_t>(job.batch_size() / num_replicas);
}

}  // namespace weft
