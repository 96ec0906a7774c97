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

}  // namespace

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string TrainResult::ToJson() const {
  return absl::StrFormat(
      "{\"state\": %s, \"job\": %s, \"steps\": %d, \"epochs\": %d, \"train_loss\": %.6f, \"test_accuracy\": %.4f, "
      "\"test_loss\": %.6f, \"test_examples\": %d, \"samples_per_second\": %.1f, \"wall_seconds\": %.3f}",
      JsonString(state), JsonString(job), steps, epochs, train_loss, test_accuracy, test_loss, test_examples,
      samples_per_second, wall_seconds);
}

absl::StatusOr<EvalResult> EvaluateDataset(const JobSpec& job, const data::InMemoryDataset& test,
                                           const TrainingLoopHooks& hooks) {
  EvalResult r;
  if (test.size() == 0 || !hooks.eval_batch) return r;
  data::BatchOptions opts = data::BatchOptionsFromSpec(job.dataset(), /*batch_size=*/500, job.seed(), false);
  ASSIGN_OR_RETURN(auto it, data::BatchIterator::Create(&test, opts));
  double correct = 0, loss = 0;
  for (;;) {
    ASSIGN_OR_RETURN(std::optional<data::Batch> batch, it->Next());
    if (!batch.has_value()) break;
    auto got = hooks.eval_batch(*batch);
    if (!got.ok()) return Annotate(got.status(), "evaluation");
    correct += got->first;
    loss += got->second;
    r.examples += batch->size();
  }
  r.accuracy = correct / static_cast<double>(r.examples);
  r.loss = loss / static_cast<double>(r.examples);
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
  source.step = [&](int64_t) -> absl::StatusOr<StepResult> {
    for (;;) {
      ASSIGN_OR_RETURN(std::optional<data::Batch> batch, it->Next());
      if (!batch.has_value()) continue;  // the marker after an epoch's last batch
      ASSIGN_OR_RETURN(float loss, hooks.step(*batch));
      return StepResult{loss, batch->size(), 1};
    }
  };
  if (hooks.eval_batch != nullptr && test.size() > 0) {
    source.evaluate = [&]() { return EvaluateDataset(job, test, hooks); };
  }
  return RunTrainingLoop(job, source, hooks.on_progress, hooks.cancelled, started);
}

absl::StatusOr<TrainResult> RunTrainingLoop(const JobSpec& job, const StepSource& source,
                                            const std::function<void(const TrainProgress&)>& on_progress,
                                            const std::atomic<bool>* cancelled_flag, Clock::time_point started) {
  auto log = Logger("train");
  TrainResult result;
  result.job = job.name();
  const int64_t per_epoch = source.batches_per_epoch;
  if (per_epoch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("job '", job.name(), "': ", source.examples,
                                                   " training examples do not make one batch"));
  }
  TrainProgress p;
  p.total_steps = job.steps() > 0 ? job.steps() : per_epoch * job.epochs();
  p.epochs = job.steps() > 0 ? (job.steps() + per_epoch - 1) / per_epoch : job.epochs();
  p.epoch = 1;
  if (source.start_step < 0 || source.start_step > p.total_steps) {
    return absl::InvalidArgumentError(absl::StrCat("job '", job.name(), "': cannot start at step ", source.start_step,
                                                   " of ", p.total_steps));
  }
  p.step = source.start_step;
  p.epoch = source.start_step / per_epoch + 1;
  result.epochs = source.start_step / per_epoch;
  if (source.start_step > 0) {
    log->info("training '{}': resuming at step {} of {} (epoch {})", job.name(), p.step, p.total_steps, p.epoch);
  } else {
    log->info("training '{}': {} steps, {} examples per epoch, batch {}", job.name(), p.total_steps,
              source.examples, job.batch_size());
  }

  const bool evaluate = source.evaluate != nullptr && !job.eval().skip();
  auto cancelled = [&] { return cancelled_flag != nullptr && cancelled_flag->load(); };
  double epoch_loss = 0, last_epoch_loss = 0;
  // Steps of the current epoch, and those of them whose loss this run saw
  // (a resumed run enters an epoch part-way).
  int64_t epoch_steps = source.start_step % per_epoch, loss_steps = 0;
  int64_t samples = 0;
  double train_seconds = 0;
  const int every = job.eval().every_epochs();
  bool evaluated_last = false;
  auto record_eval = [&](const EvalResult& e) {
    result.test_accuracy = e.accuracy;
    result.test_loss = e.loss;
    result.test_examples = e.examples;
  };
  Clock::time_point t0 = Clock::now();
  auto end_epoch = [&]() -> absl::Status {
    train_seconds += Seconds(t0);
    last_epoch_loss = loss_steps > 0 ? epoch_loss / loss_steps : 0;
    p.epoch_end = true;
    p.test_accuracy = -1;
    evaluated_last = false;
    if (every > 0 && p.epoch % every == 0 && evaluate) {
      ASSIGN_OR_RETURN(EvalResult e, source.evaluate());
      p.test_accuracy = e.accuracy;
      record_eval(e);
      evaluated_last = true;
    }
    if (on_progress) on_progress(p);
    p.epoch_end = false;
    ++result.epochs;
    ++p.epoch;
    epoch_loss = 0;
    epoch_steps = 0;
    loss_steps = 0;
    t0 = Clock::now();
    return absl::OkStatus();
  };
  while (p.step < p.total_steps) {
    if (cancelled()) {
      result.state = "CANCELLED";
      break;
    }
    const int64_t max_steps = std::min(per_epoch - epoch_steps, p.total_steps - p.step);
    absl::StatusOr<StepResult> step = source.step(max_steps);
    if (!step.ok()) {
      if (cancelled()) {  // the step was aborted by a cancel
        result.state = "CANCELLED";
        break;
      }
      return Annotate(step.status(), absl::StrCat("training step ", p.step + 1));
    }
    if (!std::isfinite(step->loss)) {
      return absl::FailedPreconditionError(absl::StrCat("the loss became ", step->loss, " at step ", p.step + 1,
                                                        "; lower the learning rate"));
    }
    if (step->steps < 1 || step->steps > max_steps) {
      return absl::InternalError(absl::StrCat("a training call ran ", step->steps, " steps; at most ", max_steps,
                                              " were left"));
    }
    p.step += step->steps;
    epoch_steps += step->steps;
    loss_steps += step->steps;
    epoch_loss += static_cast<double>(step->loss) * step->steps;  // the last step's loss stands for the run
    samples += step->examples;
    p.loss = epoch_loss / static_cast<double>(loss_steps);
    p.elapsed_seconds = Seconds(started);
    const double t = train_seconds + Seconds(t0);
    p.samples_per_second = t > 0 ? samples / t : 0;
    if (on_progress) on_progress(p);
    if (epoch_steps == per_epoch) RETURN_IF_ERROR(end_epoch());
    if (source.after_steps) RETURN_IF_ERROR(source.after_steps(p.step));
  }
  if (loss_steps > 0) {  // a run counted in steps (or cancelled) can stop mid-epoch
    train_seconds += Seconds(t0);
    last_epoch_loss = epoch_loss / loss_steps;
  }
  if (result.state.empty()) result.state = "SUCCEEDED";
  result.steps = p.step;
  result.train_loss = last_epoch_loss;
  result.samples_per_second = train_seconds > 0 ? samples / train_seconds : 0;
  if (!evaluated_last && evaluate && result.state == "SUCCEEDED") {
    ASSIGN_OR_RETURN(EvalResult e, source.evaluate());
    record_eval(e);
  }
  result.wall_seconds = Seconds(started);
  // Debug: callers print their own summary, and a progress bar may still own the line.
  log->debug("'{}' {}: {} steps, loss {:.4f}, test accuracy {:.4f}, {:.0f} samples/s", job.name(), result.state,
             result.steps, result.train_loss, result.test_accuracy, result.samples_per_second);
  return result;
}

}  // namespace weft
