// The defaults a JobSpec's unset (zero) fields stand for, in one place, so
// the master, the planner and the strategies fill them in the same way.
//
// Thread-safety: pure functions and constants.
#ifndef WEFT_JOB_DEFAULTS_H_
#define WEFT_JOB_DEFAULTS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"

namespace weft {

// recovery.* when 0.
inline constexpr int kDefaultTaskWaitSeconds = 120;
inline constexpr int kDefaultMaxRestarts = 20;
inline constexpr int kDefaultHeartbeatMs = 1000;
inline constexpr int kDefaultHeartbeatTimeoutMs = 5000;
// checkpoint.keep when 0.
inline constexpr int kDefaultCheckpointKeep = 3;
// strategy.fusion_bytes when 0: the all-reduce bucket size.
inline constexpr int64_t kDefaultFusionBytes = 4 << 20;

// The job's recovery.* settings with their defaults filled in.
struct RecoverySettings {
  absl::Duration heartbeat_interval;
  absl::Duration heartbeat_timeout;
  absl::Duration task_wait;
  int max_restarts = 0;  // 0: the first task failure ends the job
};
// max_restarts 0 means the default budget; -1 means none at all.
RecoverySettings EffectiveRecovery(const RecoveryPolicy& policy);
RecoverySettings EffectiveRecovery(const JobSpec& job);

// How many checkpoints to keep.
int EffectiveCheckpointKeep(const CheckpointPolicy& policy);

// Target all-reduce bucket size in bytes.
int64_t EffectiveFusionBytes(const StrategySpec& spec);
// Whether the replicas step in lockstep: only PARAMETER_SERVER may run
// asynchronously (sync: false); every other kind is sync whatever it says.
bool EffectiveSync(const StrategySpec& spec);
// MIRRORED / CENTRAL_STORAGE: how many of a worker's `local_devices` (of
// which `local_gpus` are GPUs, listed first) hold replicas: num_devices, or
// every GPU, or every device when none is a GPU. The caller checks the
// result against local_devices.
int EffectiveNumDevices(const StrategySpec& spec, int local_devices, int local_gpus);

// elastic.min_workers with its default (1).
int EffectiveMinWorkers(const ElasticPolicy& policy);
// How many of `live_workers` workers an elastic job trains on: the largest
// n <= live_workers (and <= elastic.max_workers when set) that divides
// batch_size, so the global batch stays whole; 0 when that n would be below
// elastic.min_workers, or none divides.
int ElasticReplicaCount(const JobSpec& job, int live_workers);
// How long a lost worker of an elastic job has to come back before the job
// goes on without it: elastic.wait_seconds, recovery.task_wait when 0, zero
// when -1.
absl::Duration ElasticWait(const JobSpec& job);

// The batch each of `num_replicas` replicas reads: batch_size split evenly.
// INVALID_ARGUMENT "strategy KIND splits batch_size B over n replicas; ..."
// when it does not divide, or when num_replicas < 1.
absl::StatusOr<int64_t> ReplicaBatch(const JobSpec& job, int num_replicas);

}  // namespace weft

#endif  // WEFT_JOB_DEFAULTS_H_
