// Checkpointer: the master's side of a job's checkpoints.
//
// A checkpoint of step S is the directory <policy.dir>/step-<S, 12 digits>/
// (ps/checkpoint_index.h) holding one shard file per task that holds the
// session's variables and, written last, the MANIFEST (ps/manifest.h):
//
//   Save: ListShards on every task in parallel; SaveShard on every task with
//   variables in the session, in parallel, each to "<job>-<index>.shard"
//   (written atomically by the task); then the manifest with each file's size
//   and CRC-32C; then the older checkpoints beyond `keep` are deleted. A
//   failure anywhere leaves no manifest, so the directory is not a
//   checkpoint and restore passes over it.
//   Restore: RestoreShard of each shard on its owner task, all in parallel
//   (each task validates its whole file before it replaces anything).
//
// The directory must be one file system that every task and the master see
// (a shared volume; on one machine, any directory): tasks write the shards,
// the master reads them to checksum them.
//
// Save and Restore must run between steps (no step of the session in
// flight), which makes both exact (ps/ps_handler.h).
//
// Thread-safety: Save and Restore from one thread at a time; Due is const.
#ifndef WEFT_MASTER_CHECKPOINTER_H_
#define WEFT_MASTER_CHECKPOINTER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/env.h"
#include "master/worker_cache.h"
#include "proto/job.pb.h"
#include "ps/checkpoint_index.h"

namespace weft {
namespace master {

class Checkpointer {
 public:
  // `workers` (borrowed) outlives the checkpointer; `env` too.
  Checkpointer(Env* env, WorkerCacheInterface* workers, std::string job_name, CheckpointPolicy policy);

  // The job asks for checkpoints (its policy names a directory).
  bool enabled() const { return !policy_.dir().empty(); }
  const CheckpointPolicy& policy() const { return policy_; }

  // Whether a checkpoint is due after `step`: every_steps since step 0, or
  // every_seconds since the last Save (or since construction).
  bool Due(int64_t step) const;

  // Saves the variables of `session_handle` at `step` (see above) and
  // returns the checkpoint. The error names the task or file at fault; the
  // directory of a failed save is left without a manifest.
  // `holders`, when not empty, are the only tasks that can hold variables
  // (the ps tasks of a PARAMETER_SERVER job): the others are not asked, so
  // a worker being restarted does not hold the checkpoint up.
  absl::StatusOr<ps::CheckpointEntry> Save(const std::string& session_handle, int64_t step,
                                           const std::vector<std::string>& holders = {});

  // Restores `checkpoint` into `session_handle`, whose graphs must be
  // registered on every owner task (MasterSession::Prepare).
  absl::Status Restore(const std::string& session_handle, const ps::CheckpointEntry& checkpoint);

  // Where a (re)started job resumes: the newest valid checkpoint in the
  // policy's dir, else in its resume_from; NOT_FOUND when neither has one.
  // Damaged newer checkpoints are skipped and logged.
  absl::StatusOr<ps::CheckpointEntry> FindResumePoint() const;

  // The shard file name of `task` ("/job:ps/task:1" -> "ps-1.shard").
  static std::string ShardFileName(const std::string& task);

 private:
  Env* const env_;
  WorkerCacheInterface* const workers_;
  const std::string job_name_;
  const CheckpointPolicy policy_;
  absl::Time last_save_;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_CHECKPOINTER_H_
