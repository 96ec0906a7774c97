#include "master/checkpointer.h"

#include "common/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "graph/device_name.h"
#include "job/defaults.h"
#include "master/cluster_probe.h"
#include "ps/manifest.h"

namespace weft {
namespace master {
namespace {


// An OWNER file holds a user name and a newline; anything longer is not one.
constexpr size_t kMaxOwnerFileBytes = 4096;

std::string DescribeOwner(const std::string& owner) {
  return owner.empty() ? "no user (an insecure master)" : absl::StrCat("user ", owner);
}

// Writes all of `data` to `fd`, then fsyncs it. `what` names the file.
absl::Status WriteAllAndSync(int fd, absl::string_view data, const std::string& what) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat("write(", what, ")"));
    data.remove_prefix(static_cast<size_t>(n));
  }
  if (::fsync(fd) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("fsync(", what, ")"));
  return absl::OkStatus();
}

// Makes `owner` the owner of the checkpoint directory `dir` (relative to
// `root`, created 0700 when missing) unless it has an OWNER file already;
// then checks that file. The file appears whole or not at all: it is written
// under a temp name and hard-linked into place, which fails when another
// writer got there first (its claim then stands).
absl::Status ClaimCheckpointDir(const ConfinedRoot& root, const std::string& dir, const std::string& owner,
                                absl::string_view field) {
  ASSIGN_OR_RETURN(std::optional<std::string> existing, ReadCheckpointOwner(root, dir));
  if (existing.has_value() || owner.empty()) return CheckCheckpointOwner(root, dir, owner, field);
  const std::string name = JoinPath(dir, kCheckpointOwnerFileName);
  const std::string temp = absl::StrFormat("%s.tmp.%016x", name, absl::Uniform<uint64_t>(absl::BitGen()));
  ASSIGN_OR_RETURN(const int fd, root.OpenFile(temp, O_WRONLY | O_CREAT | O_EXCL, 0600, /*create_dirs=*/true));
  absl::Status written = WriteAllAndSync(fd, absl::StrCat(owner, "\n"), JoinPath(root.path(), temp));
  if (::close(fd) != 0 && written.ok()) written = absl::ErrnoToStatus(errno, absl::StrCat("close(", temp, ")"));
  const std::string temp_path = JoinPath(root.path(), temp);
  bool claimed = false;
  if (written.ok()) {
    absl::StatusOr<std::string> target = root.Resolve(name, /*create_dirs=*/false);
    if (!target.ok()) {
      written = target.status();
    } else if (::link(temp_path.c_str(), target->c_str()) == 0) {
      claimed = true;
    } else if (errno != EEXIST) {
      written = absl::ErrnoToStatus(errno, absl::StrCat("link(", temp_path, ", ", *target, ")"));
    }
  }
  ::unlink(temp_path.c_str());
  RETURN_IF_ERROR(written);
  if (claimed) {
    Logger("master")->info("checkpoint directory {} belongs to {} from now on", JoinPath(root.path(), dir),
                           DescribeOwner(owner));
  }
  return CheckCheckpointOwner(root, dir, owner, field);
}

}  // namespace

absl::StatusOr<std::string> RelativeCheckpointDir(const ConfinedRoot& root, const std::string& dir,
                                                  absl::string_view field) {
  absl::StatusOr<std::string> relative = root.Relativize(dir);
  if (relative.ok()) return relative;
  if (absl::IsPermissionDenied(relative.status())) {  // lexically outside
    return absl::InvalidArgumentError(
        absl::StrCat("job: ", field, " '", dir, "' is outside the checkpoint root ", root.path()));
  }
  return absl::InvalidArgumentError(absl::StrCat("job: ", field, " '", dir,
                                                 "' is not allowed under the checkpoint root ", root.path(), ": ",
                                                 relative.status().message()));
}

absl::StatusOr<std::optional<std::string>> ReadCheckpointOwner(const ConfinedRoot& root, const std::string& dir) {
  absl::StatusOr<int> fd = root.OpenFile(JoinPath(dir, kCheckpointOwnerFileName), O_RDONLY);
  if (absl::IsNotFound(fd.status())) return std::nullopt;
  RETURN_IF_ERROR(fd.status());
  std::string content(kMaxOwnerFileBytes + 1, '\0');
  size_t got = 0;
  int err = 0;
  while (got < content.size()) {
    const ssize_t n = ::read(*fd, &content[got], content.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(*fd);
  const std::string path = JoinPath(root.path(), JoinPath(dir, kCheckpointOwnerFileName));
  if (err != 0) return absl::ErrnoToStatus(err, absl::StrCat("read(", path, ")"));
  if (got > kMaxOwnerFileBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is longer than ", kMaxOwnerFileBytes, " bytes: not an OWNER file"));
  }
  content.resize(got);
  if (!content.empty() && content.back() == '\n') content.pop_back();
  return content;
}

absl::Status CheckCheckpointOwner(const ConfinedRoot& root, const std::string& dir, const std::string& owner,
                                  absl::string_view field) {
  ASSIGN_OR_RETURN(std::optional<std::string> existing, ReadCheckpointOwner(root, dir));
  if (!existing.has_value() || *existing == owner) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "checkpoint directory ", JoinPath(root.path(), dir), " belongs to ", DescribeOwner(*existing), ", so a job of ",
      DescribeOwner(owner), " cannot use it as ", field, " (an operator shares a checkpoint directory between users "
      "by editing its ", kCheckpointOwnerFileName, " file)"));
}

absl::Status CheckCheckpointPolicy(const ConfinedRoot& root, const CheckpointPolicy& policy,
                                   const std::string& owner) {
  for (const auto& [field, dir] : {std::pair<const char*, const std::string*>{"checkpoint.dir", &policy.dir()},
                                   {"checkpoint.resume_from", &policy.resume_from()}}) {
    if (dir->empty()) continue;
    ASSIGN_OR_RETURN(const std::string relative, RelativeCheckpointDir(root, *dir, field));
    absl::Status s = CheckCheckpointOwner(root, relative, owner, field);
    if (!s.ok()) return Annotate(s, "job");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Checkpointer>> Checkpointer::Create(Env* env, WorkerCacheInterface* workers,
                                                                   std::string job_name, CheckpointPolicy policy,
                                                                   CheckpointerOptions options) {
  std::string dir = policy.dir();
  std::string resume_from = policy.resume_from();
  if (options.root.has_value()) {
    if (!dir.empty()) {
      ASSIGN_OR_RETURN(dir, RelativeCheckpointDir(*options.root, dir, "checkpoint.dir"));
    }
    if (!resume_from.empty()) {
      ASSIGN_OR_RETURN(resume_from, RelativeCheckpointDir(*options.root, resume_from, "checkpoint.resume_from"));
    }
  }
  return std::unique_ptr<Checkpointer>(new Checkpointer(env, workers, std::move(job_name), std::move(policy),
                                                        std::move(options), std::move(dir), std::move(resume_from)));
}

Checkpointer::Checkpointer(Env* env, WorkerCacheInterface* workers, std::string job_name, CheckpointPolicy policy,
                           CheckpointerOptions options, std::string dir, std::string resume_from)
    : env_(env),
      workers_(workers),
      job_name_(std::move(job_name)),
      policy_(std::move(policy)),
      options_(std::move(options)),
      dir_(std::move(dir)),
      resume_from_(std::move(resume_from)),
      last_save_micros_(env_->NowMicros()) {}

absl::StatusOr<std::string> Checkpointer::LocalPath(const std::string& name, bool create_dirs) const {
  if (options_.root.has_value()) return options_.root->Resolve(name, create_dirs);
  if (create_dirs) RETURN_IF_ERROR(env_->CreateDirs(DirName(name)));
  return name;
}

absl::StatusOr<std::string> Checkpointer::TaskPath(const std::string& local) const {
  if (options_.root.has_value()) return options_.root->Relativize(local);
  return local;
}

std::string Checkpointer::ShardFileName(const std::string& task) {
  absl::StatusOr<DeviceName> name = DeviceName::Parse(task);
  if (name.ok() && !name->job.empty() && name->task >= 0) return absl::StrCat(name->job, "-", name->task, ".shard");
  // Not a canonical task name: keep it readable and free of separators.
  return absl::StrCat(absl::StrReplaceAll(task, {{"/", "_"}, {":", "-"}}), ".shard");
}

bool Checkpointer::Due(int64_t step) const {
  if (!enabled()) return false;
  if (policy_.every_steps() > 0 && step % policy_.every_steps() == 0) return true;
  return policy_.every_seconds() > 0 &&
         env_->NowMicros() - last_save_micros_ >= int64_t{policy_.every_seconds()} * 1000000;
}

// One Save as its observer sees it: a step of the tasks asked, begun at
// construction and ended at destruction, each task done once it answered
// for its shard or was found to hold none.
class ObservedSave {
 public:
  ObservedSave(StepObserver* observer, int64_t step, const std::vector<std::string>* tasks)
      : observer_(observer), id_(-1 - step), start_(absl::Now()) {
    if (observer_ == nullptr) return;
    StepObserver::StepInfo info;
    info.step_id = id_;
    info.tasks = tasks;
    info.start = start_;
    info.checkpoint_step = step;
    observer_->StepStarted(info);
  }
  ~ObservedSave() {
    if (observer_ != nullptr) observer_->StepEnded(id_, status_);
  }
  ObservedSave(const ObservedSave&) = delete;
  ObservedSave& operator=(const ObservedSave&) = delete;

  // Thread-safe (the observer is).
  void Done(const std::string& task, const absl::Status& s) {
    if (observer_ != nullptr) observer_->RunGraphDone(id_, task, absl::Now() - start_, s);
  }
  void set_status(const absl::Status& s) { status_ = s; }

 private:
  StepObserver* const observer_;
  const int64_t id_;  // negative: no session's step has it
  const absl::Time start_;
  absl::Status status_ = absl::CancelledError("the save ended early");
};

absl::StatusOr<std::vector<std::string>> Checkpointer::ShardOwners(const std::string& session_handle,
                                                                   const std::vector<std::string>& tasks,
                                                                   ObservedSave* observed) const {
  std::vector<ListShardsRequest> list_requests(tasks.size());
  std::vector<ListShardsResponse> lists(tasks.size());
  for (ListShardsRequest& r : list_requests) r.add_session_handle(session_handle);
  std::vector<absl::Status> listed = FanOut(tasks.size(), [&](size_t i, StatusCallback done) {
    WorkerInterface* w = workers_->GetOrCreateWorker(tasks[i]);
    if (w == nullptr) {
      return done(absl::FailedPreconditionError(absl::StrCat("task ", tasks[i], " is not in the cluster")));
    }
    w->ListShardsAsync(&list_requests[i], &lists[i], std::move(done));
  });
  std::vector<std::string> owners;
  for (size_t i = 0; i < tasks.size(); ++i) {
    // NOT_FOUND: the session has no graph on that task, so no variables.
    if (absl::IsNotFound(listed[i])) {
      observed->Done(tasks[i], absl::OkStatus());
      continue;
    }
    RETURN_IF_ERROR(WithTask(listed[i], tasks[i]));
    const size_t before = owners.size();
    for (const SessionVariables& sv : lists[i].session()) {
      if (sv.session_handle() == session_handle && sv.variable_size() > 0) owners.push_back(tasks[i]);
    }
    if (owners.size() == before) observed->Done(tasks[i], absl::OkStatus());
  }
  if (owners.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("session ", session_handle, " holds no variables on any task: nothing to checkpoint"));
  }
  return owners;
}

namespace {

// The master's checkpoint series (docs/observability.md).
void RecordCheckpointMetrics(double seconds, uint64_t bytes) {
  static metrics::Histogram* const duration =
      metrics::Registry::Default()
          .AddHistogram("weft_checkpoint_duration_seconds",
                        "Time to write a checkpoint: every shard, their check and the manifest.", {})
          ->With({});
  static metrics::Counter* const written =
      metrics::Registry::Default()
          .AddCounter("weft_checkpoint_written_bytes_total", "Bytes of checkpoint shards written.")
          ->With({});
  static metrics::Counter* const saves =
      metrics::Registry::Default().AddCounter("weft_checkpoints_total", "Checkpoints written.")->With({});
  duration->Observe(seconds);
  written->Increment(static_cast<double>(bytes));
  saves->Increment();
}

}  // namespace

absl::StatusOr<ps::CheckpointEntry> Checkpointer::Save(const std::string& session_handle, int64_t step,
                                                       const std::vector<std::string>& holders) {
  if (!enabled()) return absl::FailedPreconditionError(absl::StrCat("job '", job_name_, "' has no checkpoint dir"));
  const absl::Time started = absl::Now();
  if (options_.root.has_value()) {
    RETURN_IF_ERROR(Annotate(ClaimCheckpointDir(*options_.root, dir_, options_.owner, "checkpoint.dir"),
                             absl::StrCat("job '", job_name_, "'")));
  }
  // The step's directory as the tasks name it, and as the master reaches it.
  const std::string task_dir = JoinPath(dir_, ps::CheckpointDirName(step));
  ASSIGN_OR_RETURN(const std::string manifest_path,
                   LocalPath(JoinPath(task_dir, ps::kManifestFileName), /*create_dirs=*/true));
  const std::string dir = DirName(manifest_path);
  // A directory of this step from an earlier attempt stops being a
  // checkpoint before its shards are replaced.
  if (env_->FileExists(manifest_path)) RETURN_IF_ERROR(env_->DeleteFile(manifest_path));

  const std::vector<std::string> tasks = holders.empty() ? workers_->ListTasks() : holders;
  ObservedSave observed(options_.observer, step, &tasks);
  absl::StatusOr<std::vector<std::string>> owners = ShardOwners(session_handle, tasks, &observed);
  if (!owners.ok()) {
    observed.set_status(owners.status());
    return owners.status();
  }
  std::vector<SaveShardResponse> saved;
  std::vector<absl::Status> statuses = SaveShards(session_handle, step, task_dir, *owners, &saved, &observed);
  absl::StatusOr<ps::CheckpointEntry> entry = FinishSave(step, dir, *owners, statuses, saved, started);
  observed.set_status(entry.status());
  return entry;
}

std::vector<absl::Status> Checkpointer::SaveShards(const std::string& session_handle, int64_t step,
                                                   const std::string& task_dir,
                                                   const std::vector<std::string>& owners,
                                                   std::vector<SaveShardResponse>* saved,
                                                   ObservedSave* observed) const {
  std::vector<SaveShardRequest> save_requests(owners.size());
  saved->resize(owners.size());
  for (size_t i = 0; i < owners.size(); ++i) {
    save_requests[i].set_session_handle(session_handle);
    save_requests[i].set_path(JoinPath(task_dir, ShardFileName(owners[i])));
    save_requests[i].set_global_step(step);
  }
  return FanOut(owners.size(), [&](size_t i, StatusCallback done) {
    WorkerInterface* w = workers_->GetOrCreateWorker(owners[i]);
    if (w == nullptr) {
      return done(absl::FailedPreconditionError(absl::StrCat("task ", owners[i], " is not in the cluster")));
    }
    w->SaveShardAsync(&save_requests[i], &(*saved)[i],
                      [observed, &task = owners[i], done = std::move(done)](const absl::Status& s) {
                        observed->Done(task, s);
                        done(s);
                      });
  });
}

absl::StatusOr<ps::CheckpointEntry> Checkpointer::FinishSave(int64_t step, const std::string& dir,
                                                                const std::vector<std::string>& owners,
                                                                const std::vector<absl::Status>& statuses,
                                                                const std::vector<SaveShardResponse>& saved,
                                                                absl::Time started) {
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
  last_save_micros_ = env_->NowMicros();
  RecordCheckpointMetrics(absl::ToDoubleSeconds(absl::Now() - started), bytes);
  Logger("master")->info("job '{}': checkpoint of step {} in {} ({} shard(s), {} bytes, {:.0f} ms)", job_name_, step,
                         dir, owners.size(), bytes, absl::ToDoubleMilliseconds(absl::Now() - started));
  const int keep = EffectiveCheckpointKeep(policy_);
  absl::StatusOr<std::string> all = LocalPath(dir_, /*create_dirs=*/false);
  absl::Status pruned = all.ok() ? ps::PruneCheckpoints(env_, *all, keep) : all.status();
  if (!pruned.ok()) Logger("master")->warn("job '{}': deleting old checkpoints: {}", job_name_, pruned.ToString());

  ps::CheckpointEntry entry;
  entry.path = dir;
  entry.step = step;
  entry.valid = true;
  entry.manifest = std::move(manifest);
  entry.bytes = bytes;
  return entry;
}

absl::Status Checkpointer::Restore(const std::string& session_handle, const ps::CheckpointEntry& checkpoint,
                                  const std::vector<std::string>& replicas) {
  const CheckpointManifest& m = checkpoint.manifest;
  // (task, its shard): each owner its own; or each replica its own, else the first.
  std::vector<std::pair<std::string, int>> todo;
  for (int i = 0; i < m.shard_size() && replicas.empty(); ++i) todo.emplace_back(m.shard(i).owner_task(), i);
  for (const std::string& task : replicas) {
    int from = 0;
    for (int i = 0; i < m.shard_size(); ++i) from = m.shard(i).owner_task() == task ? i : from;
    if (m.shard_size() == 0) return absl::DataLossError(absl::StrCat("checkpoint ", checkpoint.path, " has no shard"));
    todo.emplace_back(task, from);
  }
  std::vector<RestoreShardRequest> requests(todo.size());
  std::vector<RestoreShardResponse> responses(todo.size());
  std::vector<WorkerInterface*> owners(todo.size());
  ASSIGN_OR_RETURN(const std::string task_dir, TaskPath(checkpoint.path));
  for (size_t i = 0; i < todo.size(); ++i) {
    owners[i] = workers_->GetOrCreateWorker(todo[i].first);
    if (owners[i] == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("checkpoint ", checkpoint.path, " has a shard of task ",
                                                        todo[i].first, ", which is not in the cluster"));
    }
    requests[i].set_session_handle(session_handle);
    requests[i].set_path(JoinPath(task_dir, m.shard(todo[i].second).file()));
    requests[i].set_expect_global_step(m.step());
  }
  std::vector<absl::Status> statuses = FanOut(requests.size(), [&](size_t i, StatusCallback done) {
    owners[i]->RestoreShardAsync(&requests[i], &responses[i], std::move(done));
  });
  int variables = 0;
  for (size_t i = 0; i < todo.size(); ++i) {
    RETURN_IF_ERROR(Annotate(WithTask(statuses[i], todo[i].first), absl::StrCat("restoring checkpoint ",
                                                                                checkpoint.path)));
    variables += responses[i].num_variables();
  }
  Logger("master")->info("job '{}': restored {} variable(s) of step {} from {}", job_name_, variables, m.step(),
                         checkpoint.path);
  return absl::OkStatus();
}

absl::StatusOr<ps::CheckpointEntry> Checkpointer::FindResumePoint() const {
  absl::Status last = absl::NotFoundError(absl::StrCat("job '", job_name_, "' names no checkpoint directory"));
  for (const auto& [field, name] : {std::pair<const char*, const std::string*>{"checkpoint.dir", &dir_},
                                    {"checkpoint.resume_from", &resume_from_}}) {
    if (name->empty()) continue;
    if (options_.root.has_value()) {
      RETURN_IF_ERROR(Annotate(CheckCheckpointOwner(*options_.root, *name, options_.owner, field),
                               absl::StrCat("job '", job_name_, "'")));
    }
    absl::StatusOr<std::string> dir = LocalPath(*name, /*create_dirs=*/false);
    if (absl::IsNotFound(dir.status())) {  // a parent is missing: no checkpoint there
      last = dir.status();
      continue;
    }
    RETURN_IF_ERROR(dir.status());
    absl::StatusOr<ps::CheckpointEntry> found = ps::NewestValidCheckpoint(env_, *dir);
    if (found.ok() || !absl::IsNotFound(found.status())) return found;
    last = found.status();
  }
  return last;
}

}  // namespace master
}  // namespace weft
