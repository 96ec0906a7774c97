#include "runtime/trainer.h"

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "graph/lowering.h"
#include "runtime/data/dataset.h"
#include "runtime/device.h"
#include "runtime/executor.h"

namespace weft {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

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

}  // namespace

std::string TrainResult::ToJson() const {
  return absl::StrFormat(
      "{\"state\": %s, \"job\": %s, \"steps\": %d, \"epochs\": %d, \"train_loss\": %.6f, \"test_accuracy\": %.4f, "
      "\"test_loss\": %.6f, \"test_examples\": %d, \"samples_per_second\": %.1f, \"wall_seconds\": %.3f}",
      JsonString(state), JsonString(job), steps, epochs, train_loss, test_accuracy, test_loss, test_examples,
      samples_per_second, wall_seconds);
}

struct LocalTrainer::State {
  JobSpec job;
  TrainingGraph tg;
  data::InMemoryDataset train_data;
  data::InMemoryDataset test_data;
  std::unique_ptr<ThreadPool> inter_op_pool;
  std::unique_ptr<CpuDevice> device;
  std::unique_ptr<Executor> train_step;
  std::unique_ptr<Executor> eval_step;  // null when the graph has no `correct`
  Clock::time_point created;
};

LocalTrainer::LocalTrainer(std::unique_ptr<State> state) : s_(std::move(state)) {}
LocalTrainer::~LocalTrainer() = default;

absl::StatusOr<std::unique_ptr<LocalTrainer>> LocalTrainer::Create(const JobSpec& job) {
  auto s = std::make_unique<State>();
  s->created = Clock::now();
  s->job = job;
  ASSIGN_OR_RETURN(s->tg, LowerJob(job));
  const int64_t num_classes = job.has_model() ? job.model().num_classes() : 0;
  const std::vector<int64_t> shape(s->tg.example_shape.dims().begin(), s->tg.example_shape.dims().end());
  ASSIGN_OR_RETURN(s->train_data, data::LoadDataset(job.dataset(), /*train=*/true, shape, num_classes));
  if (!job.eval().skip() && !s->tg.correct.empty()) {
    ASSIGN_OR_RETURN(s->test_data, data::LoadDataset(job.dataset(), /*train=*/false, shape, num_classes));
  }
  const int threads = job.intra_op_threads() == 0 ? NumCores() : job.intra_op_threads();
  s->device = std::make_unique<CpuDevice>("/job:localhost/task:0/device:CPU:0", threads);
  if (threads > 1) s->inter_op_pool = std::make_unique<ThreadPool>("inter_op", threads);

  ExecutorOptions train_opts;
  train_opts.feeds = {s->tg.features, s->tg.labels};
  train_opts.fetches = {s->tg.loss};
  train_opts.targets = {s->tg.train_op};
  train_opts.inter_op_pool = s->inter_op_pool.get();
  ASSIGN_OR_RETURN(s->train_step, Executor::Create(s->tg.graph.get(), s->device.get(), train_opts));
  if (!s->tg.correct.empty()) {
    ExecutorOptions eval_opts;
    eval_opts.feeds = {s->tg.features, s->tg.labels};
    eval_opts.fetches = {s->tg.correct};
    if (!s->tg.eval_loss.empty()) eval_opts.fetches.push_back(s->tg.eval_loss);
    eval_opts.inter_op_pool = s->inter_op_pool.get();
    ASSIGN_OR_RETURN(s->eval_step, Executor::Create(s->tg.graph.get(), s->device.get(), eval_opts));
  }
  return std::unique_ptr<LocalTrainer>(new LocalTrainer(std::move(s)));
}

absl::StatusOr<EvalResult> LocalTrainer::Evaluate() {
  if (s_->eval_step == nullptr) return absl::FailedPreconditionError("the model has no accuracy output to evaluate");
  EvalResult r;
  if (s_->test_data.size() == 0) return r;
  data::BatchOptions opts = data::BatchOptionsFromSpec(s_->job.dataset(), /*batch_size=*/500, s_->job.seed(), false);
  ASSIGN_OR_RETURN(auto it, data::BatchIterator::Create(&s_->test_data, opts));
  double correct = 0, loss = 0;
  std::vector<Tensor> out;
  for (;;) {
    ASSIGN_OR_RETURN(std::optional<data::Batch> batch, it->Next());
    if (!batch.has_value()) break;
    const Tensor feeds[] = {batch->features, batch->labels};
    RETURN_IF_ERROR(Annotate(s_->eval_step->Run(feeds, &out), "evaluation"));
    correct += out[0].data<float>()[0];
    if (out.size() > 1) loss += out[1].data<float>()[0];
    r.examples += batch->size();
  }
  r.accuracy = correct / static_cast<double>(r.examples);
  r.loss = loss / static_cast<double>(r.examples);
  return r;
}

absl::StatusOr<TrainResult> LocalTrainer::Train(const std::function<void(const TrainProgress&)>& on_progress) {
  const JobSpec& job = s_->job;
  auto log = Logger("train");
  TrainResult result;
  result.job = job.name();
  data::BatchOptions opts = data::BatchOptionsFromSpec(job.dataset(), job.batch_size(), job.seed(), true);
  if (job.steps() == 0) opts.num_epochs = job.epochs();
  ASSIGN_OR_RETURN(auto it, data::BatchIterator::Create(&s_->train_data, opts));
  const int64_t per_epoch = it->batches_per_epoch();
  TrainProgress p;
  p.total_steps = job.steps() > 0 ? job.steps() : per_epoch * job.epochs();
  p.epochs = job.steps() > 0 ? (job.steps() + per_epoch - 1) / per_epoch : job.epochs();
  p.epoch = 1;
  log->info("training '{}': {} steps, {} examples per epoch, batch {}", job.name(), p.total_steps,
            s_->train_data.size(), job.batch_size());

  std::vector<Tensor> out;
  double epoch_loss = 0, last_epoch_loss = 0;
  int64_t epoch_steps = 0;
  int64_t samples = 0;
  double train_seconds = 0;
  const int every = job.eval().every_epochs();
  bool evaluated_last = false;
  Clock::time_point t0 = Clock::now();
  // An epoch ends after per_epoch steps; the iterator's end-of-epoch marker
  // that follows carries no work and is skipped.
  auto end_epoch = [&]() -> absl::Status {
    train_seconds += Seconds(t0);
    last_epoch_loss = epoch_steps > 0 ? epoch_loss / epoch_steps : 0;
    p.epoch_end = true;
    p.test_accuracy = -1;
    evaluated_last = false;
    if (every > 0 && p.epoch % every == 0 && s_->eval_step != nullptr && !job.eval().skip()) {
      ASSIGN_OR_RETURN(EvalResult e, Evaluate());
      p.test_accuracy = e.accuracy;
      result.test_accuracy = e.accuracy;
      result.test_loss = e.loss;
      result.test_examples = e.examples;
      evaluated_last = true;
    }
    if (on_progress) on_progress(p);
    p.epoch_end = false;
    ++result.epochs;
    ++p.epoch;
    epoch_loss = 0;
    epoch_steps = 0;
    t0 = Clock::now();
    return absl::OkStatus();
  };
  while (p.step < p.total_steps) {
    if (cancelled_.load()) {
      result.state = "CANCELLED";
      break;
    }
    ASSIGN_OR_RETURN(std::optional<data::Batch> batch, it->Next());
    if (!batch.has_value()) continue;  // the marker after an epoch's last batch
    const Tensor feeds[] = {batch->features, batch->labels};
    absl::Status s = s_->train_step->Run(feeds, &out, p.step);
    if (!s.ok()) return Annotate(s, absl::StrCat("training step ", p.step + 1));
    const float loss = out[0].data<float>()[0];
    if (!std::isfinite(loss)) {
      return absl::FailedPreconditionError(absl::StrCat("the loss became ", loss, " at step ", p.step + 1,
                                                        "; lower the learning rate"));
    }
    ++p.step;
    ++epoch_steps;
    epoch_loss += loss;
    samples += batch->size();
    p.loss = epoch_loss / epoch_steps;
    p.elapsed_seconds = Seconds(s_->created);
    const double t = train_seconds + Seconds(t0);
    p.samples_per_second = t > 0 ? samples / t : 0;
    if (on_progress) on_progress(p);
    if (epoch_steps == per_epoch) RETURN_IF_ERROR(end_epoch());
  }
  if (epoch_steps > 0) {  // a run counted in steps can stop mid-epoch
    train_seconds += Seconds(t0);
    last_epoch_loss = epoch_loss / epoch_steps;
  }
  if (result.state.empty()) result.state = "SUCCEEDED";
  result.steps = p.step;
  result.train_loss = last_epoch_loss;
  result.samples_per_second = train_seconds > 0 ? samples / train_seconds : 0;
  if (!evaluated_last && s_->eval_step != nullptr && !job.eval().skip() && result.state == "SUCCEEDED") {
    ASSIGN_OR_RETURN(EvalResult e, Evaluate());
    result.test_accuracy = e.accuracy;
    result.test_loss = e.loss;
    result.test_examples = e.examples;
  }
  result.wall_seconds = Seconds(s_->created);
  // Debug: callers print their own summary, and a progress bar may still own the line.
  log->debug("'{}' {}: {} steps, loss {:.4f}, test accuracy {:.4f}, {:.0f} samples/s", job.name(), result.state,
             result.steps, result.train_loss, result.test_accuracy, result.samples_per_second);
  return result;
}

}  // namespace weft
