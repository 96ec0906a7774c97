#include "runtime/training_loop.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace weft {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }
double Between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace


std::string TrainResult::ToJson() const {
  return absl::StrFormat(
      "{\"state\": %s, \"job\": %s, \"steps\": %d, \"epochs\": %d, \"train_loss\": %.6f, \"test_accuracy\": %.4f, "
      "\"test_loss\": %.6f, \"test_examples\": %d, \"test_top_k_accuracy\": %.4f, \"test_perplexity\": %.4f, "
      "\"samples_per_second\": %.1f, \"warmup_seconds\": %.6f, \"wall_seconds\": %.6f}",
      JsonString(JobState_Name(state)), JsonString(job), steps, epochs, train_loss, test_accuracy, test_loss,
      test_examples, test_top_k_accuracy, test_perplexity, samples_per_second, warmup_seconds, wall_seconds);
}

std::string TrainResult::TestMetrics() const {
  std::string out;
  if (test_accuracy >= 0) {
    absl::StrAppendFormat(&out, ", test accuracy %.4f", test_accuracy);
  } else if (test_loss >= 0) {
    absl::StrAppendFormat(&out, ", test loss %.6f", test_loss);
  }
  if (test_top_k_accuracy >= 0) absl::StrAppendFormat(&out, ", test top-k accuracy %.4f", test_top_k_accuracy);
  if (test_perplexity >= 0) absl::StrAppendFormat(&out, ", test perplexity %.4f", test_perplexity);
  return out;
}

absl::StatusOr<EvalResult> EvaluateDataset(const JobSpec& job, const data::InMemoryDataset& test,
                                           const TrainingLoopHooks& hooks) {
  EvalResult r;
  if (test.size() == 0 || !hooks.eval_batch) return r;
  data::BatchOptions opts = data::BatchOptionsFromSpec(job.dataset(), /*batch_size=*/500, job.seed(), false);
  ASSIGN_OR_RETURN(auto it, data::BatchIterator::Create(&test, opts));
  double correct = 0, loss = 0, top_k = 0;
  bool has_top_k = false, has_correct = true;
  for (;;) {
    ASSIGN_OR_RETURN(std::optional<data::Batch> batch, it->Next());
    if (!batch.has_value()) break;
    auto got = hooks.eval_batch(*batch);
    if (!got.ok()) return Annotate(got.status(), "evaluation");
    if (got->correct < 0) has_correct = false;
    correct += got->correct;
    loss += got->loss;
    if (got->correct_top_k >= 0) {
      has_top_k = true;
      top_k += got->correct_top_k;
    }
    r.examples += batch->predictions();  // one per example, or a sequence model's one per position
  }
  r.accuracy = has_correct ? correct / static_cast<double>(r.examples) : -1;
  r.loss = loss / static_cast<double>(r.examples);
  if (has_top_k) r.top_k_accuracy = top_k / static_cast<double>(r.examples);
  return r;
}

absl::StatusOr<TrainResult> RunTrainingLoop(const JobSpec& job, const data::InMemoryDataset& train,
                                            const data::InMemoryDataset& test, const TrainingLoopHooks& hooks,
                                            Clock::time_point started) {
  data::BatchOptions opts = data::BatchOptionsFromSpec(job.dataset(), job.batch_size(), job.seed(), true);
  if (job.steps() == 0) opts.num_epochs = job.epochs();
  ASSIGN_OR_RETURN(auto it, data::BatchIterator::Create(&train, opts));
  StepSource source;
  source.examples = train.size();
  source.batches_per_epoch = it->batches_per_epoch();
  // With next_batch, one batch (or epoch marker) is drawn ahead of the step.
  std::optional<std::optional<data::Batch>> ahead;
  source.step = [&](int64_t) -> absl::StatusOr<StepResult> {
    for (;;) {
      std::optional<data::Batch> batch;
      if (ahead.has_value()) {
        batch = *std::move(ahead);
        ahead.reset();
      } else {
        ASSIGN_OR_RETURN(batch, it->Next());
      }
      if (!batch.has_value()) continue;  // the marker after an epoch's last batch
      if (hooks.next_batch != nullptr) {
        ASSIGN_OR_RETURN(std::optional<data::Batch> next, it->Next());
        // Past an epoch's end marker to the next epoch's first batch (or the
        // end of the last epoch, which repeats).
        if (!next.has_value()) {
          ASSIGN_OR_RETURN(next, it->Next());
        }
        if (next.has_value()) hooks.next_batch(*next);
        ahead = std::move(next);
      }
      ASSIGN_OR_RETURN(float loss, hooks.step(*batch));
      return StepResult{loss, batch->size(), 1};
    }
  };
  if (hooks.eval_batch != nullptr && test.size() > 0) {
    source.evaluate = [&]() { return EvaluateDataset(job, test, hooks); };
  }
  return RunTrainingLoop(job, source, hooks.on_progress, hooks.cancelled, started);
}

namespace {

// One run of the loop over a StepSource: its progress, the current epoch's
// loss and the time spent training, kept apart from the loop so that each
// part (start, a call of steps, an epoch's end, the finish) stays small.
class Loop {
 public:
  Loop(const JobSpec& job, const StepSource& source, const std::function<void(const TrainProgress&)>& on_progress,
       const std::atomic<bool>* cancelled, Clock::time_point started)
      : job_(job),
        source_(source),
        on_progress_(on_progress),
        cancelled_(cancelled),
        started_(started),
        per_epoch_(source.batches_per_epoch),
        evaluate_(source.evaluate != nullptr && !job.eval().skip()),
        every_(job.eval().every_epochs()) {
    result_.job = job.name();
  }

  absl::StatusOr<TrainResult> Run() {
    RETURN_IF_ERROR(Start());
    while (p_.step < p_.total_steps) {
      ASSIGN_OR_RETURN(const bool go_on, Steps());
      if (!go_on) {
        result_.state = CANCELLED;
        break;
      }
    }
    return Finish();
  }

 private:
  bool cancelled() const { return cancelled_ != nullptr && cancelled_->load(); }
  Clock::time_point Now() const { return source_.now ? source_.now() : Clock::now(); }
  double Since(Clock::time_point t) const { return Between(t, Now()); }

  absl::Status Start() {
    if (per_epoch_ < 1) {
      return absl::InvalidArgumentError(absl::StrCat("job '", job_.name(), "': ", source_.examples,
                                                     " training examples do not make one batch"));
    }
    p_.total_steps = job_.steps() > 0 ? job_.steps() : per_epoch_ * job_.epochs();
    p_.epochs = job_.steps() > 0 ? (job_.steps() + per_epoch_ - 1) / per_epoch_ : job_.epochs();
    const int64_t start = source_.start_step;
    if (start < 0 || start > p_.total_steps) {
      return absl::InvalidArgumentError(
          absl::StrCat("job '", job_.name(), "': cannot start at step ", start, " of ", p_.total_steps));
    }
    p_.step = start;
    p_.epoch = start / per_epoch_ + 1;
    result_.epochs = start / per_epoch_;
    // Steps of the current epoch: a resumed run enters an epoch part-way.
    epoch_steps_ = start % per_epoch_;
    auto log = Logger("train");
    if (start > 0) {
      log->info("training '{}': resuming at step {} of {} (epoch {})", job_.name(), p_.step, p_.total_steps,
                p_.epoch);
    } else {
      log->info("training '{}': {} steps, {} examples per epoch, batch {}", job_.name(), p_.total_steps,
                source_.examples, job_.batch_size());
    }
    t0_ = Now();
    return absl::OkStatus();
  }

  // One call of source.step and what follows it: progress, the epoch's
  // end, after_steps. False when a cancel ends the loop.
  absl::StatusOr<bool> Steps() {
    if (cancelled()) return false;
    const int64_t max_steps = std::min(per_epoch_ - epoch_steps_, p_.total_steps - p_.step);
    absl::StatusOr<StepResult> step = source_.step(max_steps);
    if (!step.ok()) {
      if (cancelled()) return false;  // the step was aborted by a cancel
      return Annotate(step.status(), absl::StrCat("training step ", p_.step + 1));
    }
    if (!std::isfinite(step->loss)) {
      return absl::FailedPreconditionError(absl::StrCat("the loss became ", step->loss, " at step ", p_.step + 1,
                                                        "; lower the learning rate"));
    }
    if (step->steps < 1 || step->steps > max_steps) {
      return absl::InternalError(absl::StrCat("a training call ran ", step->steps, " steps; at most ", max_steps,
                                              " were left"));
    }
    p_.step += step->steps;
    epoch_steps_ += step->steps;
    loss_steps_ += step->steps;
    epoch_loss_ += static_cast<double>(step->loss) * step->steps;  // the last step's loss stands for the run
    if (!warmed_up_ && p_.step < p_.total_steps) {
      // The run's first call carries its setup; the throughput starts after it.
      result_.warmup_seconds = Since(t0_);
      t0_ = Now();
    } else {
      samples_ += step->examples;
    }
    warmed_up_ = true;
    p_.loss = epoch_loss_ / static_cast<double>(loss_steps_);
    p_.elapsed_seconds = Seconds(started_);
    const double t = train_seconds_ + Since(t0_);
    p_.samples_per_second = t > 0 ? samples_ / t : 0;
    if (on_progress_) on_progress_(p_);
    if (epoch_steps_ == per_epoch_) RETURN_IF_ERROR(EndEpoch());
    if (source_.after_steps) RETURN_IF_ERROR(source_.after_steps(p_.step));
    return true;
  }

  absl::Status EndEpoch() {
    train_seconds_ += Since(t0_);
    last_epoch_loss_ = loss_steps_ > 0 ? epoch_loss_ / loss_steps_ : 0;
    p_.epoch_end = true;
    p_.test_accuracy = -1;
    p_.test_loss = -1;
    evaluated_last_ = false;
    if (every_ > 0 && p_.epoch % every_ == 0 && evaluate_) {
      ASSIGN_OR_RETURN(EvalResult e, source_.evaluate());
      p_.test_accuracy = e.accuracy;
      p_.test_loss = e.examples > 0 ? e.loss : -1;
      RecordEval(e);
      evaluated_last_ = true;
    }
    if (on_progress_) on_progress_(p_);
    p_.epoch_end = false;
    ++result_.epochs;
    ++p_.epoch;
    epoch_loss_ = 0;
    epoch_steps_ = 0;
    loss_steps_ = 0;
    t0_ = Now();
    return absl::OkStatus();
  }

  void RecordEval(const EvalResult& e) {
    result_.test_accuracy = e.accuracy;
    result_.test_loss = e.loss;
    result_.test_examples = e.examples;
    result_.test_top_k_accuracy = e.top_k_accuracy;
    // A TEXT dataset's loss is nats per byte: its exponential is the
    // perplexity per byte.
    const bool text = job_.dataset().format() == DatasetSpec::TEXT;
    result_.test_perplexity = text && e.examples > 0 && e.loss >= 0 ? std::exp(e.loss) : -1;
  }

  absl::StatusOr<TrainResult> Finish() {
    if (loss_steps_ > 0) {  // a run counted in steps (or cancelled) can stop mid-epoch
      train_seconds_ += Since(t0_);
      last_epoch_loss_ = epoch_loss_ / loss_steps_;
    }
    if (result_.state == JOB_STATE_UNSPECIFIED) result_.state = SUCCEEDED;
    result_.steps = p_.step;
    result_.train_loss = last_epoch_loss_;
    result_.samples_per_second = train_seconds_ > 0 ? samples_ / train_seconds_ : 0;
    if (!evaluated_last_ && evaluate_ && result_.state == SUCCEEDED) {
      ASSIGN_OR_RETURN(EvalResult e, source_.evaluate());
      RecordEval(e);
    }
    result_.wall_seconds = Seconds(started_);
    // Debug: callers print their own summary, and a progress bar may still own the line.
    Logger("train")->debug("'{}' {}: {} steps, loss {:.4f}, test accuracy {:.4f}, {:.0f} samples/s", job_.name(),
                           JobState_Name(result_.state), result_.steps, result_.train_loss, result_.test_accuracy,
                           result_.samples_per_second);
    return result_;
  }

  const JobSpec& job_;
  const StepSource& source_;
  const std::function<void(const TrainProgress&)>& on_progress_;
  const std::atomic<bool>* const cancelled_;
  const Clock::time_point started_;
  const int64_t per_epoch_;
  const bool evaluate_;
  const int every_;
  TrainResult result_;
  TrainProgress p_;
  double epoch_loss_ = 0, last_epoch_loss_ = 0;
  int64_t epoch_steps_ = 0;
  int64_t loss_steps_ = 0;  // steps of the epoch whose loss this run saw
  int64_t samples_ = 0;
  double train_seconds_ = 0;
  bool evaluated_last_ = false;
  bool warmed_up_ = false;  // the run's first call of steps is behind it
  Clock::time_point t0_;  // when the current epoch's training resumed
};

}  // namespace

absl::StatusOr<TrainResult> RunTrainingLoop(const JobSpec& job, const StepSource& source,
                                            const std::function<void(const TrainProgress&)>& on_progress,
                                            const std::atomic<bool>* cancelled, Clock::time_point started) {
  return Loop(job, source, on_progress, cancelled, started).Run();
}

}  // namespace weft
