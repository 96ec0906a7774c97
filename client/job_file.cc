#include "client/job_file.h"

#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

namespace weft {
namespace {

class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  explicit CollectErrors(std::string origin) : origin_(std::move(origin)) {}
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    if (first_.empty()) first_ = absl::StrCat(origin_, ":", line + 1, ":", column + 1, ": ", message);
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  const std::string& first() const { return first_; }

 private:
  std::string origin_;
  std::string first_;
};

}  // namespace

absl::StatusOr<JobSpec> ParseJob(const std::string& text, const std::string& origin) {
  JobSpec job;
  absl::string_view trimmed = absl::StripLeadingAsciiWhitespace(text);
  if (!trimmed.empty() && trimmed[0] == '{') {
    google::protobuf::util::JsonParseOptions opts;
    opts.ignore_unknown_fields = false;
    auto s = google::protobuf::util::JsonStringToMessage(std::string(trimmed), &job, opts);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ": not a valid JSON job: ", s.message().as_string()));
    }
    return job;
  }
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors(origin);
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &job)) {
    return absl::InvalidArgumentError(errors.first().empty() ? absl::StrCat(origin, ": not a valid job file")
                                                             : errors.first());
  }
  return job;
}

absl::StatusOr<JobSpec> LoadJobFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open job file '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading job file '", path, "'"));
  auto job = ParseJob(ss.str(), path);
  if (!job.ok()) return job.status();
  DatasetSpec* ds = job->mutable_dataset();
  if (!ds->dir().empty() && ds->dir()[0] != '/') {
    const size_t slash = path.rfind('/');
    if (slash != std::string::npos) ds->set_dir(path.substr(0, slash + 1) + ds->dir());
  }
  return job;
}

absl::Status ValidateJob(const JobSpec& job) {
  if (job.batch_size() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("job: batch_size must be positive, got ", job.batch_size()));
  }
  if (job.epochs() < 0 || job.steps() < 0) return absl::InvalidArgumentError("job: epochs and steps cannot be negative");
  if (job.epochs() == 0 && job.steps() == 0) return absl::InvalidArgumentError("job: set epochs or steps");
  if (job.model_source_case() == JobSpec::MODEL_SOURCE_NOT_SET) {
    return absl::InvalidArgumentError("job: set a model (Sequential layers) or a graph");
  }
  if (!job.has_dataset()) return absl::InvalidArgumentError("job: dataset is missing");
  const DatasetSpec& ds = job.dataset();
  if (ds.format() == DatasetSpec::TFRECORD) {
    if (ds.train_files_size() == 0) return absl::InvalidArgumentError("job: dataset.train_files is empty");
  } else if (ds.dir().empty() && ds.train_images().empty()) {
    return absl::InvalidArgumentError("job: dataset needs dir or train_images/train_labels");
  }
  if (ds.scale() < 0) return absl::InvalidArgumentError("job: dataset.scale cannot be negative");
  if (job.intra_op_threads() < 0) return absl::InvalidArgumentError("job: intra_op_threads cannot be negative");
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
  const RecoveryPolicy& rp = job.recovery();
  if (rp.task_wait_seconds() < 0 || rp.heartbeat_ms() < 0 || rp.heartbeat_timeout_ms() < 0 || rp.max_restarts() < -1) {
    return absl::InvalidArgumentError(
        "job: recovery.task_wait_seconds, heartbeat_ms and heartbeat_timeout_ms cannot be negative, and "
        "max_restarts must be >= -1");
  }
  return absl::OkStatus();
}

}  // namespace weft
