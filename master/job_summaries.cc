#include "master/job_summaries.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "graph/lowering.h"
#include "master/checkpointer.h"

namespace weft {
namespace master {
namespace {

// New event file names tried before giving up (each differs by its counter).
constexpr int kNameAttempts = 16;

// The schedule the optimizer applies (graph/lowering.h). A raw graph model
// carries its optimizer inside its graph, unknown here.
std::optional<LrSchedule> LearningRate(const JobSpec& job) {
  if (!job.has_model()) return std::nullopt;
  absl::StatusOr<LrSchedule> s = LearningRateOf(job);
  if (!s.ok()) return std::nullopt;
  return *s;
}

// A new event file's absolute path in the run directory `run` (relative to
// `root`), its directories created by the no-link walk.
absl::StatusOr<std::string> NewConfinedEventFile(const ConfinedRoot& root, const std::string& run, Env* env) {
  for (int attempt = 0; attempt < kNameAttempts; ++attempt) {
    const std::string name = JoinPath(run, SummaryWriter::NewEventFileName(env));
    absl::StatusOr<std::string> path = root.Resolve(name, /*create_dirs=*/true);
    if (!path.ok()) return Annotate(path.status(), absl::StrCat("event file directory ", JoinPath(root.path(), run)));
    if (!env->FileExists(*path)) return path;
  }
  return absl::AlreadyExistsError(absl::StrCat("event file directory ", JoinPath(root.path(), run), ": ",
                                               kNameAttempts, " new event file names were all taken"));
}

}  // namespace

absl::Status CheckSummaryPolicy(const ConfinedRoot& root, const JobSpec& job, const std::string& owner) {
  if (!job.has_summary()) return absl::OkStatus();
  const std::string& dir = job.summary().dir();
  ASSIGN_OR_RETURN(const std::string relative, RelativeCheckpointDir(root, dir, "summary.dir"));
  // Only the part that exists is walked: a missing directory is created at
  // the job's start by the same walk, and cannot be a link now.
  absl::StatusOr<std::string> walked = root.Resolve(relative, /*create_dirs=*/false);
  if (!walked.ok() && !absl::IsNotFound(walked.status())) {
    return Annotate(walked.status(), absl::StrCat("job: summary.dir '", dir, "'"));
  }
  absl::Status owned = CheckCheckpointOwner(root, relative, owner, "summary.dir");
  if (!owned.ok() && !absl::IsNotFound(owned)) return Annotate(owned, "job: summary.dir");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<JobSummaries>> JobSummaries::Open(const JobSpec& job, const std::string& job_id,
                                                                  const std::optional<ConfinedRoot>& root, Env* env) {
  if (!job.has_summary()) return nullptr;
  if (env == nullptr) env = Env::Default();
  std::unique_ptr<SummaryWriter> writer;
  if (root.has_value()) {
    ASSIGN_OR_RETURN(const std::string relative, RelativeCheckpointDir(*root, job.summary().dir(), "summary.dir"));
    ASSIGN_OR_RETURN(const std::string path, NewConfinedEventFile(*root, JoinPath(relative, job_id), env));
    ASSIGN_OR_RETURN(writer, SummaryWriter::Open(path, env));
  } else {
    ASSIGN_OR_RETURN(writer, SummaryWriter::Create(JoinPath(job.summary().dir(), job_id), env));
  }
  return std::unique_ptr<JobSummaries>(new JobSummaries(job, job_id, std::move(writer)));
}

std::unique_ptr<JobSummaries> JobSummaries::OpenOrLog(const JobSpec& job, const std::string& job_id,
                                                      const std::optional<ConfinedRoot>& root, Env* env) {
  absl::StatusOr<std::unique_ptr<JobSummaries>> opened = Open(job, job_id, root, env);
  if (opened.ok() && *opened != nullptr) {
    Logger("master")->info("job {}: TensorBoard event file {}", job_id, (*opened)->path());
    return *std::move(opened);
  }
  if (!opened.ok()) {
    Logger("master")->error("job {}: no TensorBoard summaries; the job trains on without them: {}", job_id,
                            opened.status().ToString());
  }
  return std::unique_ptr<JobSummaries>(new JobSummaries(job, job_id, nullptr));
}

JobSummaries::JobSummaries(const JobSpec& job, std::string job_id, std::unique_ptr<SummaryWriter> writer)
    : job_id_(std::move(job_id)),
      every_(job.summary().every_steps() > 0 ? job.summary().every_steps() : kDefaultSummaryEverySteps),
      learning_rate_(LearningRate(job)),
      writer_(std::move(writer)) {}

std::string JobSummaries::path() const { return writer_ == nullptr ? "" : writer_->path(); }

void JobSummaries::Write(int64_t step, absl::Span<const SummaryScalar> scalars) {
  if (writer_ == nullptr) return;
  absl::Status s = writer_->WriteScalars(step, scalars);
  if (s.ok()) return;
  Logger("master")->error("job {}: TensorBoard summaries stop; the job trains on without them: {}", job_id_,
                          s.ToString());
  writer_.reset();
}

void JobSummaries::WriteTrain(int64_t step, double loss, double samples_per_second) {
  SummaryScalar scalars[4];
  size_t n = 0;
  scalars[n++] = {"train/loss", static_cast<float>(loss)};
  scalars[n++] = {"train/samples_per_second", static_cast<float>(samples_per_second)};
  if (window_steps_ > 0) {
    scalars[n++] = {"train/step_time_seconds", static_cast<float>(window_seconds_ / window_steps_)};
  }
  if (learning_rate_.has_value()) {
    // The rate of the step's update (t = step under synchronous strategies).
    scalars[n++] = {"train/learning_rate", static_cast<float>(learning_rate_->At(static_cast<double>(step)))};
  }
  Write(step, absl::MakeConstSpan(scalars, n));
  last_train_step_ = step;
  window_seconds_ = 0;
  window_steps_ = 0;
}

void JobSummaries::OnProgress(const TrainProgress& p) {
  if (writer_ == nullptr) return;
  const Clock::time_point now = Clock::now();
  if (p.epoch_end) {
    // Sent after the epoch's evaluation: the next step's time starts now.
    last_update_ = now;
    if (p.test_accuracy >= 0) {
      const SummaryScalar eval[] = {{"eval/accuracy", static_cast<float>(p.test_accuracy)}};
      Write(p.step, eval);
      last_eval_step_ = p.step;
    }
    return;
  }
  if (started_ && p.step > last_step_) {
    window_seconds_ += std::chrono::duration<double>(now - last_update_).count();
    window_steps_ += p.step - last_step_;
  } else {
    // The run's first steps (their time includes the start) or a run that
    // went back to a checkpoint (its time includes the recovery).
    window_seconds_ = 0;
    window_steps_ = 0;
  }
  // Due when the step reaches a multiple of every_steps (or passes one, with
  // several steps per update) and at the last step.
  const bool due = p.step >= p.total_steps ||
                   (started_ ? p.step / every_ != last_step_ / every_ : p.step % every_ == 0);
  started_ = true;
  last_step_ = p.step;
  last_update_ = now;
  if (due) WriteTrain(p.step, p.loss, p.samples_per_second);
}

void JobSummaries::OnResult(const absl::StatusOr<TrainResult>& result) {
  if (writer_ == nullptr) return;
  if (result.ok()) {
    if (result->steps > 0 && result->steps != last_train_step_ && result->steps == last_step_) {
      // A run that stopped (cancelled, preempted) between two summaries.
      WriteTrain(result->steps, result->train_loss, result->samples_per_second);
    }
    // A cancelled or preempted run is not evaluated at its end: its figures
    // are an earlier evaluation's, already written.
    std::vector<SummaryScalar> eval;
    const bool evaluated = result->state == SUCCEEDED;
    if (evaluated && result->test_accuracy >= 0 && last_eval_step_ != result->steps) {
      eval.push_back({"eval/accuracy", static_cast<float>(result->test_accuracy)});
    }
    if (evaluated && result->test_loss >= 0) eval.push_back({"eval/loss", static_cast<float>(result->test_loss)});
    if (evaluated && result->test_top_k_accuracy >= 0) {
      eval.push_back({"eval/top_k_accuracy", static_cast<float>(result->test_top_k_accuracy)});
    }
    if (evaluated && result->test_perplexity >= 0) {
      eval.push_back({"eval/perplexity", static_cast<float>(result->test_perplexity)});
    }
    Write(result->steps, eval);
  }
  if (writer_ == nullptr) return;
  absl::Status s = writer_->Sync();
  if (s.ok()) s = writer_->Close();
  if (!s.ok()) Logger("master")->error("job {}: closing its TensorBoard event file: {}", job_id_, s.ToString());
  writer_.reset();
}

}  // namespace master
}  // namespace weft
