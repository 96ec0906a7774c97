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
// Checkpoint root (the daemons' --checkpoint_root, the same directory on the
// master and every task): policy.dir and policy.resume_from are names
// relative to it, or absolute paths inside it (RelativeCheckpointDir); the
// tasks are sent shard paths relative to it (they refuse any other), and
// the master reads through paths it resolved under its root without
// following symbolic links (ConfinedRoot::Resolve). Without a root
// (in-process tests that build a Checkpointer directly) the policy's
// directories are absolute paths used as given and there is no OWNER file.
//
// Ownership: the first save into a checkpoint directory writes its OWNER
// file (0600), the job owner's user name (JobStatus.owner). A job of another
// owner may not save into that directory, prune it or resume from it
// (PERMISSION_DENIED, checked at SubmitJob and again here before each save
// and each resume). Only the owner strings are compared, so an admin's jobs
// are held to it too, for resume_from as well; sharing a checkpoint between
// users takes an operator editing the directory's OWNER file. A job of an
// insecure master (owner "") writes no OWNER file and may use only
// directories without one.
//
// Save and Restore must run between steps (no step of the session in
// flight), which makes both exact (ps/ps_handler.h).
//
// Thread-safety: Save and Restore from one thread at a time; Due is const.
#ifndef WEFT_MASTER_CHECKPOINTER_H_
#define WEFT_MASTER_CHECKPOINTER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/confined_root.h"
#include "common/env.h"
#include "master/step_observer.h"
#include "master/worker_cache.h"
#include "proto/job.pb.h"
#include "ps/checkpoint_index.h"

namespace weft {
namespace master {

class ObservedSave;  // checkpointer.cc

// The file in a checkpoint directory that names the user who owns it.
inline constexpr char kCheckpointOwnerFileName[] = "OWNER";

// A job's checkpoint directory (`field`: "checkpoint.dir" or
// "checkpoint.resume_from") as a name relative to `root`: a relative name as
// it is, an absolute path inside the root without the root. Purely lexical.
// INVALID_ARGUMENT otherwise: "job: checkpoint.dir '/etc/x' is outside the
// checkpoint root /tmp/weft-checkpoints", or naming the rule a name breaks
// (a ".." component, the root itself).
absl::StatusOr<std::string> RelativeCheckpointDir(const ConfinedRoot& root, const std::string& dir,
                                                  absl::string_view field);

// The user the OWNER file of the checkpoint directory `dir` (relative to
// `root`) names; nullopt when the directory or its OWNER file does not exist.
// The walk's error otherwise (a symbolic link on the way is
// PERMISSION_DENIED).
absl::StatusOr<std::optional<std::string>> ReadCheckpointOwner(const ConfinedRoot& root, const std::string& dir);

// OK when the job of `owner` may use the checkpoint directory `dir`
// (relative to `root`) as `field`: it has no OWNER file, or that names
// `owner`. PERMISSION_DENIED "checkpoint directory /r/x belongs to user
// alice, ..." otherwise.
absl::Status CheckCheckpointOwner(const ConfinedRoot& root, const std::string& dir, const std::string& owner,
                                  absl::string_view field);

// What SubmitJob checks of a job's policy on a master with a checkpoint
// root: both directories inside the root (RelativeCheckpointDir) and
// neither another user's (CheckCheckpointOwner). Errors start with "job: ".
absl::Status CheckCheckpointPolicy(const ConfinedRoot& root, const CheckpointPolicy& policy,
                                   const std::string& owner);

struct CheckpointerOptions {
  // The master's checkpoint root (MasterServerOptions::checkpoint_root).
  // Unset: no root, absolute directories and no OWNER file (see above).
  std::optional<ConfinedRoot> root;
  // The job's owner (JobStatus.owner); "" from an insecure master.
  std::string owner;
  // Told of each Save as a step (StepInfo::checkpoint_step), so that a
  // save held up by a task is diagnosed as a step is (master/step_watch.h);
  // borrowed, may be null.
  StepObserver* observer = nullptr;
};

class Checkpointer {
 public:
  // `workers` (borrowed) outlives the checkpointer; `env` too. With a root,
  // INVALID_ARGUMENT when the policy's directories are not inside it.
  static absl::StatusOr<std::unique_ptr<Checkpointer>> Create(Env* env, WorkerCacheInterface* workers,
                                                              std::string job_name, CheckpointPolicy policy,
                                                              CheckpointerOptions options = {});

  // The job asks for checkpoints (its policy names a directory).
  bool enabled() const { return !policy_.dir().empty(); }
  const CheckpointPolicy& policy() const { return policy_; }

  // Whether a checkpoint is due after `step`: every_steps since step 0, or
  // every_seconds since the last Save (or since construction), by the Env's
  // clock.
  bool Due(int64_t step) const;

  // Saves the variables of `session_handle` at `step` (see above) and
  // returns the checkpoint, whose path is the master's (absolute) one. The
  // error names the task or file at fault; the directory of a failed save is
  // left without a manifest. PERMISSION_DENIED, with nothing written, when
  // the directory belongs to another user; the first save writes its OWNER.
  // `holders`, when not empty, are the only tasks that can hold variables
  // (the ps tasks of a PARAMETER_SERVER job): the others are not asked, so
  // a worker being restarted does not hold the checkpoint up.
  absl::StatusOr<ps::CheckpointEntry> Save(const std::string& session_handle, int64_t step,
                                           const std::vector<std::string>& holders = {});

  // Restores `checkpoint` into `session_handle`, whose graphs must be
  // registered on every owner task (MasterSession::Prepare). `replicas`,
  // when not empty, are tasks that each hold one whole replica of mirrored
  // variables (an elastic MULTI_WORKER_MIRRORED job's members, which need
  // not be the tasks that saved it): each restores its own shard, or the
  // first one when it saved none, and no other task is asked.
  absl::Status Restore(const std::string& session_handle, const ps::CheckpointEntry& checkpoint,
                       const std::vector<std::string>& replicas = {});

  // Where a (re)started job resumes: the newest valid checkpoint in the
  // policy's dir, else in its resume_from; NOT_FOUND when neither has one.
  // Damaged newer checkpoints are skipped and logged. PERMISSION_DENIED when
  // either directory belongs to another user.
  absl::StatusOr<ps::CheckpointEntry> FindResumePoint() const;

  // The shard file name of `task` ("/job:ps/task:1" -> "ps-1.shard").
  static std::string ShardFileName(const std::string& task);

 private:
  Checkpointer(Env* env, WorkerCacheInterface* workers, std::string job_name, CheckpointPolicy policy,
               CheckpointerOptions options, std::string dir, std::string resume_from);

  // The master's path of `name`, a file or directory as the tasks name it:
  // with a root, resolved under it without following links; without, `name`
  // itself. With `create_dirs`, the directories that hold it are created.
  absl::StatusOr<std::string> LocalPath(const std::string& name, bool create_dirs) const;
  // The tasks' name of a path LocalPath returned (or of a CheckpointEntry's).
  absl::StatusOr<std::string> TaskPath(const std::string& local) const;
  // The tasks that hold variables of the session, asking `tasks` in
  // parallel; FAILED_PRECONDITION when none does. The others are reported
  // done to `observed`.
  absl::StatusOr<std::vector<std::string>> ShardOwners(const std::string& session_handle,
                                                       const std::vector<std::string>& tasks,
                                                       ObservedSave* observed) const;
  // Checks the shards `owners` saved (`statuses`, `saved`: SaveShards'),
  // writes the manifest in `dir` and prunes old checkpoints.
  absl::StatusOr<ps::CheckpointEntry> FinishSave(int64_t step, const std::string& dir,
                                                 const std::vector<std::string>& owners,
                                                 const std::vector<absl::Status>& statuses,
                                                 const std::vector<SaveShardResponse>& saved, absl::Time started);
  // Saves the shards of `owners`, reporting each answer to `observed`.
  std::vector<absl::Status> SaveShards(const std::string& session_handle, int64_t step, const std::string& task_dir,
                                       const std::vector<std::string>& owners, std::vector<SaveShardResponse>* saved,
                                       ObservedSave* observed) const;

  Env* const env_;
  WorkerCacheInterface* const workers_;
  const std::string job_name_;
  const CheckpointPolicy policy_;  // as the job gave it
  const CheckpointerOptions options_;
  // policy_.dir() and resume_from() as the tasks name them: relative to the
  // root, or absolute without one.
  const std::string dir_;
  const std::string resume_from_;
  int64_t last_save_micros_;  // env_->NowMicros() of the last Save
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_CHECKPOINTER_H_
