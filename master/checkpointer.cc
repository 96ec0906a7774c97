#include "master/checkpointer.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "graph/device_name.h"
#include "ps/manifest.h"

namespace weft {
namespace master {
namespace {

constexpr int kDefaultKeep = 3;

// Runs `call(i, done)` for i in [0, n) at once and waits for every `done`.
template <typename CallFn>
std::vector<absl::Status> InParallel(size_t n, CallFn call) {
  std::vector<absl::Status> statuses(n);
  absl::BlockingCounter pending(static_cast<int>(n));
  for (size_t i = 0; i < n; ++i) {
    call(i, [&statuses, &pending, i](const absl::Status& s) {
      statuses[i] = s;
      pending.DecrementCount();
    });
  }
  pending.Wait();
  return statuses;
}

}  // namespace

Checkpointer::Checkpointer(Env* env, WorkerCacheInterface* workers, std::string job_name, CheckpointPolicy policy)
    : env_(env),
      workers_(workers),
      job_name_(std::move(job_name)),
      policy_(std::move(policy)),
      last_save_(absl::Now()) {}

std::string Checkpointer::ShardFileName(const std::string& task) {
  absl::StatusOr<DeviceName> name = DeviceName::Parse(task);
  if (name.ok() && !name->job.empty() && name->task >= 0) return absl::StrCat(name->job, "-", name->task, ".shard");
  // Not a canonical task name: keep it readable and free of separators.
  return absl::StrCat(absl::StrReplaceAll(task, {{"/", "_"}, {":", "-"}}), ".shard");
}

bool Checkpointer::Due(int64_t step) const {
  if (!enabled()) return false;
  if (policy_.every_steps() > 0 && step % policy_.every_steps() == 0) return true;
  return policy_.every_seconds() > 0 && absl::Now() - last_save_ >= absl::Seconds(policy_.every_seconds());
}

absl::StatusOr<ps::CheckpointEntry> Checkpointer::Save(const std::string& session_handle, int64_t step,
                                                       const std::vector<std::string>& holders) {
  if (!enabled()) return absl::FailedPreconditionError(absl::StrCat("job '", job_name_, "' has no checkpoint dir"));
  const absl::Time started = absl::Now();
  const std::string dir = JoinPath(policy_.dir(), ps::CheckpointDirName(step));
  RETURN_IF_ERROR(env_->CreateDirs(dir));
  // A directory of this step from an earlier attempt stops being a
  // checkpoint before its shards are replaced.
  const std::string manifest_path = JoinPath(dir, ps::kManifestFileName);
  if (env_->FileExists(manifest_path)) RETURN_IF_ERROR(env_->DeleteFile(manifest_path));

  // Which tasks hold the session's variables.
  const std::vector<std::string> tasks = holders.empty() ? workers_->ListTasks() : holders;
  std::vector<ListShardsRequest> list_requests(tasks.size());
  std::vector<ListShardsResponse> lists(tasks.size());
  for (ListShardsRequest& r : list_requests) r.add_session_handle(session_handle);
  std::vector<absl::Status> listed = InParallel(tasks.size(), [&](size_t i, StatusCallback done) {
    workers_->GetOrCreateWorker(tasks[i])->ListShardsAsync(&list_requests[i], &lists[i], std::move(done));
  });
  std::vector<std::string> owners;
  for (size_t i = 0; i < tasks.size(); ++i) {
    // NOT_FOUND: the session has no graph on that task, so no variables.
    if (absl::IsNotFound(listed[i])) continue;
    RETURN_IF_ERROR(WithTask(listed[i], tasks[i]));
    for (const SessionVariables& sv : lists[i].session()) {
      if (sv.session_handle() == session_handle && sv.variable_size() > 0) owners.push_back(tasks[i]);
    }
  }
  if (owners.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("session ", session_handle, " holds no variables on any task: nothing to checkpoint"));
  }

  std::vector<SaveShardRequest> save_requests(owners.size());
  std::vector<SaveShardResponse> saved(owners.size());
  for (size_t i = 0; i < owners.size(); ++i) {
    save_requests[i].set_session_handle(session_handle);
    save_requests[i].set_path(JoinPath(dir, ShardFileName(owners[i])));
    save_requests[i].set_global_step(step);
  }
  std::vector<absl::Status> statuses = InParallel(owners.size(), [&](size_t i, StatusCallback done) {
    workers_->GetOrCreateWorker(owners[i])->SaveShardAsync(&save_requests[i], &saved[i], std::move(done));
  });
  CheckpointManifest manifest;
  manifest.set_job_name(job_name_);
  manifest.set_step(step);
  manifest.set_wall_time_micros(env_->NowMicros());
  uint64_t bytes = 0;
  for (size_t i = 0; i < owners.size(); ++i) {
    RETURN_IF_ERROR(Annotate(WithTask(statuses[i], owners[i]), absl::StrCat("saving checkpoint ", dir)));
    ManifestShard* shard = manifest.add_shard();
    shard->set_file(ShardFileName(owners[i]));
    shard->set_owner_task(owners[i]);
    shard->set_size(saved[i].size());
    shard->set_crc32c(saved[i].crc32c());
    bytes += saved[i].size();
  }
  // The tasks wrote through their own file systems: check that the master
  // sees the same bytes before the manifest vouches for them.
  RETURN_IF_ERROR(ps::VerifyCheckpoint(env_, dir, manifest));
  RETURN_IF_ERROR(ps::WriteManifest(env_, dir, manifest));
  last_save_ = absl::Now();
  Logger("master")->info("job '{}': checkpoint of step {} in {} ({} shard(s), {} bytes, {:.0f} ms)", job_name_, step,
                         dir, owners.size(), bytes, absl::ToDoubleMilliseconds(last_save_ - started));
  const int keep = policy_.keep() > 0 ? policy_.keep() : kDefaultKeep;
  absl::Status pruned = ps::PruneCheckpoints(env_, policy_.dir(), keep);
  if (!pruned.ok()) Logger("master")->warn("job '{}': deleting old checkpoints: {}", job_name_, pruned.ToString());

  ps::CheckpointEntry entry;
  entry.path = dir;
  entry.step = step;
  entry.valid = true;
  entry.manifest = std::move(manifest);
  entry.bytes = bytes;
  return entry;
}

absl::Status Checkpointer::Restore(const std::string& session_handle, const ps::CheckpointEntry& checkpoint) {
  const CheckpointManifest& m = checkpoint.manifest;
  std::vector<RestoreShardRequest> requests(m.shard_size());
  std::vector<RestoreShardResponse> responses(m.shard_size());
  std::vector<WorkerInterface*> owners(m.shard_size());
  for (int i = 0; i < m.shard_size(); ++i) {
    owners[i] = workers_->GetOrCreateWorker(m.shard(i).owner_task());
    if (owners[i] == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("checkpoint ", checkpoint.path, " has a shard of task ",
                                                        m.shard(i).owner_task(), ", which is not in the cluster"));
    }
    requests[i].set_session_handle(session_handle);
    requests[i].set_path(JoinPath(checkpoint.path, m.shard(i).file()));
    requests[i].set_expect_global_step(m.step());
  }
  std::vector<absl::Status> statuses = InParallel(requests.size(), [&](size_t i, StatusCallback done) {
    owners[i]->RestoreShardAsync(&requests[i], &responses[i], std::move(done));
  });
  int variables = 0;
  for (int i = 0; i < m.shard_size(); ++i) {
    RETURN_IF_ERROR(Annotate(WithTask(statuses[i], m.shard(i).owner_task()),
                             absl::StrCat("restoring checkpoint ", checkpoint.path)));
    variables += responses[i].num_variables();
  }
  Logger("master")->info("job '{}': restored {} variable(s) of step {} from {}", job_name_, variables, m.step(),
                         checkpoint.path);
  return absl::OkStatus();
}

absl::StatusOr<ps::CheckpointEntry> Checkpointer::FindResumePoint() const {
  absl::Status last = absl::NotFoundError(absl::StrCat("job '", job_name_, "' names no checkpoint directory"));
  for (const std::string& dir : {policy_.dir(), policy_.resume_from()}) {
    if (dir.empty()) continue;
    absl::StatusOr<ps::CheckpointEntry> found = ps::NewestValidCheckpoint(env_, dir);
    if (found.ok() || !absl::IsNotFound(found.status())) return found;
    last = found.status();
  }
  return last;
}

}  // namespace master
}  // namespace weft
