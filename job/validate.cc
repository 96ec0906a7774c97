// ValidateJob (job/job_spec.h): the checks a JobSpec must pass on its own.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "job/defaults.h"
#include "job/job_spec.h"
#include "job/strategy_spec.h"

namespace weft {
namespace {

absl::Status ValidateDataset(const JobSpec& job) {
  if (!job.has_dataset()) return absl::InvalidArgumentError("job: dataset is missing");
  const DatasetSpec& ds = job.dataset();
  if (!ds.upload_id().empty()) {
    // An uploaded dataset (MasterService.UploadDataset) brings its own IDX
    // files; its id is checked where the uploads are (the master, the tasks).
    if (ds.format() == DatasetSpec::TFRECORD) {
      return absl::InvalidArgumentError("job: dataset.upload_id holds IDX files: format must be IDX or unset");
    }
    if (!ds.dir().empty() || !ds.train_images().empty() || !ds.train_labels().empty() ||
        !ds.test_images().empty() || !ds.test_labels().empty()) {
      return absl::InvalidArgumentError(
          "job: dataset.upload_id replaces dir and the IDX file names: set one or the other");
    }
  } else if (ds.format() == DatasetSpec::TFRECORD) {
    if (ds.train_files_size() == 0) return absl::InvalidArgumentError("job: dataset.train_files is empty");
  } else if (ds.dir().empty() && ds.train_images().empty()) {
    return absl::InvalidArgumentError("job: dataset needs dir or train_images/train_labels");
  }
  if (ds.scale() < 0) return absl::InvalidArgumentError("job: dataset.scale cannot be negative");
  return absl::OkStatus();
}

absl::Status ValidateCheckpointPolicy(const JobSpec& job) {
  const CheckpointPolicy& ck = job.checkpoint();
  if (ck.every_steps() < 0 || ck.every_seconds() < 0 || ck.keep() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("job: checkpoint.every_steps (", ck.every_steps(),
                                                   "), every_seconds (", ck.every_seconds(), ") and keep (",
                                                   ck.keep(), ") cannot be negative"));
  }
  for (const auto& [field, dir] : {std::pair<const char*, std::string>{"dir", ck.dir()}, {"resume_from", ck.resume_from()}}) {
    // Relative names resolve under the daemons' --checkpoint_root; absolute
    // ones must lie inside it (the master checks, knowing the root).
    for (absl::string_view part : absl::StrSplit(dir, '/')) {
      if (part == "..") {
        return absl::InvalidArgumentError(absl::StrCat("job: checkpoint.", field, " '", dir,
                                                       "' must not contain '..' (it names a directory under the "
                                                       "checkpoint root)"));
      }
    }
  }
  if (ck.dir().empty() && (ck.every_steps() > 0 || ck.every_seconds() > 0 || !ck.resume_from().empty())) {
    return absl::InvalidArgumentError("job: checkpoint.dir is empty but the checkpoint policy asks for checkpoints");
  }
  if (!ck.dir().empty() && job.strategy().kind() == StrategySpec::NONE) {
    return absl::UnimplementedError(
        "job: checkpoints need a distribution strategy (strategy.kind); a job without one runs on one task and is "
        "not checkpointed");
  }
  return absl::OkStatus();
}

// The summary directory is a name under the checkpoint root, like
// checkpoint.dir; the master confines it (master/job_summaries.h).
absl::Status ValidateSummaryPolicy(const JobSpec& job) {
  if (!job.has_summary()) return absl::OkStatus();
  const SummaryPolicy& sp = job.summary();
  if (sp.every_steps() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("job: summary.every_steps cannot be negative, got ", sp.every_steps()));
  }
  if (sp.dir().empty()) {
    return absl::InvalidArgumentError(
        "job: summary.dir is empty; name the directory for the TensorBoard event files (under the checkpoint root)");
  }
  for (absl::string_view part : absl::StrSplit(sp.dir(), '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(absl::StrCat("job: summary.dir '", sp.dir(),
                                                     "' must not contain '..' (it names a directory under the "
                                                     "checkpoint root)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRecoveryPolicy(const RecoveryPolicy& rp) {
  if (rp.task_wait_seconds() < 0 || rp.heartbeat_ms() < 0 || rp.heartbeat_timeout_ms() < 0 || rp.max_restarts() < -1) {
    return absl::InvalidArgumentError(
        "job: recovery.task_wait_seconds, heartbeat_ms and heartbeat_timeout_ms cannot be negative, and "
        "max_restarts must be >= -1");
  }
  return absl::OkStatus();
}

absl::Status ValidateElasticPolicy(const JobSpec& job) {
  if (!job.has_elastic()) return absl::OkStatus();
  const ElasticPolicy& e = job.elastic();
  const StrategySpec::Kind kind = job.strategy().kind();
  if (kind != StrategySpec::MULTI_WORKER_MIRRORED && kind != StrategySpec::PARAMETER_SERVER) {
    return absl::UnimplementedError(absl::StrCat("job: elastic needs strategy kind MULTI_WORKER_MIRRORED or "
                                                 "PARAMETER_SERVER, not ", StrategySpec::Kind_Name(kind),
                                                 " (its replicas share one worker)"));
  }
  if (kind == StrategySpec::PARAMETER_SERVER && job.strategy().replicas_to_aggregate() > 0) {
    return absl::UnimplementedError(absl::StrCat(
        "job: elastic parameter-server jobs aggregate every replica (sync) or none (async), not "
        "replicas_to_aggregate ", job.strategy().replicas_to_aggregate(), ": a step of the first k cannot be "
        "applied whole or not at all"));
  }
  if (e.min_workers() < 0 || e.max_workers() < 0 || e.wait_seconds() < -1) {
    return absl::InvalidArgumentError(absl::StrCat("job: elastic.min_workers (", e.min_workers(), ") and max_workers (",
                                                   e.max_workers(), ") cannot be negative, and wait_seconds (",
                                                   e.wait_seconds(), ") must be >= -1"));
  }
  if (e.max_workers() > 0 && e.max_workers() < EffectiveMinWorkers(e)) {
    return absl::InvalidArgumentError(absl::StrCat("job: elastic.max_workers ", e.max_workers(),
                                                   " is below min_workers ", EffectiveMinWorkers(e)));
  }
  if (ElasticReplicaCount(job, e.max_workers() > 0 ? e.max_workers() : job.batch_size()) == 0) {
    return absl::InvalidArgumentError(absl::StrCat("job: no worker count from elastic.min_workers ",
                                                   EffectiveMinWorkers(e), " to max_workers ", e.max_workers(),
                                                   " divides batch_size ", job.batch_size()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJob(const JobSpec& job) {
  if (job.batch_size() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("job: batch_size must be positive, got ", job.batch_size()));
  }
  if (job.epochs() < 0 || job.steps() < 0) return absl::InvalidArgumentError("job: epochs and steps cannot be negative");
  if (job.epochs() == 0 && job.steps() == 0) return absl::InvalidArgumentError("job: set epochs or steps");
  if (job.model_source_case() == JobSpec::MODEL_SOURCE_NOT_SET) {
    return absl::InvalidArgumentError("job: set a model (Sequential layers) or a graph");
  }
  RETURN_IF_ERROR(ValidateDataset(job));
  if (job.intra_op_threads() < 0) return absl::InvalidArgumentError("job: intra_op_threads cannot be negative");
  RETURN_IF_ERROR(ValidateCheckpointPolicy(job));
  RETURN_IF_ERROR(ValidateSummaryPolicy(job));
  RETURN_IF_ERROR(ValidateRecoveryPolicy(job.recovery()));
  RETURN_IF_ERROR(ValidateStrategySpec(job));
  return ValidateElasticPolicy(job);
}

}  // namespace weft
