#include "master/job_runner.h"

#include <chrono>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "runtime/data/dataset.h"

namespace weft {
namespace master {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

}  // namespace

struct JobRunner::Data {
  data::InMemoryDataset train;
  data::InMemoryDataset test;
  bool can_evaluate = false;  // the graph has `correct`
  Clock::time_point created;
};

JobRunner::JobRunner(JobSpec job, TrainingGraph training, std::string session_handle,
                     WorkerCacheInterface* workers)
    : job_(std::move(job)),
      training_(std::move(training)),
      session_handle_(std::move(session_handle)),
      workers_(workers) {}

JobRunner::~JobRunner() = default;

void JobRunner::Cancel() {
  cancelled_.store(true);
  absl::MutexLock lock(&mu_);
  if (session_ != nullptr) session_->AbortRunningSteps(absl::CancelledError(absl::StrCat("job cancelled")));
}

absl::StatusOr<TrainResult> JobRunner::Run(const std::function<void(const TrainProgress&)>& on_progress) {
  Data d;
  d.created = Clock::now();
  d.can_evaluate = !training_.correct.empty();
  const int64_t num_classes = job_.has_model() ? job_.model().num_classes() : 0;
  const std::vector<int64_t> shape(training_.example_shape.dims().begin(), training_.example_shape.dims().end());
  ASSIGN_OR_RETURN(d.train, data::LoadDataset(job_.dataset(), /*train=*/true, shape, num_classes));
  if (!job_.eval().skip() && d.can_evaluate) {
    ASSIGN_OR_RETURN(d.test, data::LoadDataset(job_.dataset(), /*train=*/false, shape, num_classes));
  }

  if (cancelled_.load()) {  // before any task does work for the job
    TrainResult r;
    r.state = "CANCELLED";
    r.job = job_.name();
    r.wall_seconds = Seconds(d.created);
    return r;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<MasterSession> owned,
                   MasterSession::Create(session_handle_, training_.graph->ToGraphDef(), workers_));
  MasterSession* session = owned.get();
  {
    absl::MutexLock lock(&mu_);
    session_ = std::move(owned);
  }
  absl::StatusOr<TrainResult> result = Train(session, d, on_progress);
  {
    absl::MutexLock lock(&mu_);
    owned = std::move(session_);
  }
  absl::Status closed = owned->Close();
  if (!closed.ok()) Logger("master")->warn("job '{}': closing its session: {}", job_.name(), closed.ToString());
  if (result.ok()) result->wall_seconds = Seconds(d.created);
  return result;
}

absl::StatusOr<EvalResult> JobRunner::Evaluate(MasterSession* session, const Data& d) {
  if (!d.can_evaluate) return absl::FailedPreconditionError("the model has no accuracy output to evaluate");
  EvalResult r;
  if (d.test.size() == 0) return r;
  data::BatchOptions opts = data::BatchOptionsFromSpec(job_.dataset(), /*batch_size=*/500, job_.seed(), false);
  ASSIGN_OR_RETURN(auto it, data::BatchIterator::Create(&d.test, opts));
  std::vector<std::string> fetches = {training_.correct};
  if (!training_.eval_loss.empty()) fetches.push_back(training_.eval_loss);
  double correct = 0, loss = 0;
  std::vector<Tensor> out;
  for (;;) {
    if (cancelled_.load()) return absl::CancelledError("job cancelled during evaluation");
    ASSIGN_OR_RETURN(std::optional<data::Batch> batch, it->Next());
    if (!batch.has_value()) break;
    RETURN_IF_ERROR(Annotate(
        session->Run({{training_.features, batch->features}, {training_.labels, batch->labels}}, fetches, {}, &out),
        "evaluation"));
    correct += out[0].data<float>()[0];
    if (out.size() > 1) loss += out[1].data<float>()[0];
    r.examples += batch->size();
  }
  r.accuracy = correct / static_cast<double>(r.examples);
  r.loss = loss / static_cast<double>(r.examples);
  return r;
}

// The loop of LocalTrainer::Train, with steps run through the session.
absl::StatusOr<TrainResult> JobRunner::Train(MasterSession* session, const Data& d,
                                             const std::function<void(const TrainProgress&)>& on_progress) {
  const JobSpec& job = job_;
  auto log = Logger("master");
  TrainResult result;
  result.job = job.name();
  data::BatchOptions opts = data::BatchOptionsFromSpec(job.dataset(), job.batch_size(), job.seed(), true);
  if (job.steps() == 0) opts.num_epochs = job.epochs();
  ASSIGN_OR_RETURN(auto it, data::BatchIterator::Create(&d.train, opts));
  const int64_t per_epoch = it->batches_per_epoch();
  TrainProgress p;
  p.total_steps = job.steps() > 0 ? job.steps() : per_epoch * job.epochs();
  p.epochs = job.steps() > 0 ? (job.steps() + per_epoch - 1) / per_epoch : job.epochs();
  p.epoch = 1;
  log->info("job '{}': {} steps, {} examples per epoch, batch {}, on {} device(s)", job.name(), p.total_steps,
            d.train.size(), job.batch_size(), session->devices().size());

  const bool evaluate = d.can_evaluate && !job.eval().skip();
  const std::vector<std::string> fetches = {training_.loss};
  const std::vector<std::string> targets = {training_.train_op};
  std::vector<Tensor> out;
  double epoch_loss = 0, last_epoch_loss = 0;
  int64_t epoch_steps = 0;
  int64_t samples = 0;
  double train_seconds = 0;
  const int every = job.eval().every_epochs();
  bool evaluated_last = false;
  Clock::time_point t0 = Clock::now();
  auto end_epoch = [&]() -> absl::Status {
    train_seconds += Seconds(t0);
    last_epoch_loss = epoch_steps > 0 ? epoch_loss / epoch_steps : 0;
    p.epoch_end = true;
    p.test_accuracy = -1;
    evaluated_last = false;
    if (every > 0 && p.epoch % every == 0 && evaluate) {
      ASSIGN_OR_RETURN(EvalResult e, Evaluate(session, d));
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
    absl::Status s =
        session->Run({{training_.features, batch->features}, {training_.labels, batch->labels}}, fetches, targets, &out);
    if (!s.ok()) {
      if (cancelled_.load()) {  // the step was aborted by Cancel
        result.state = "CANCELLED";
        break;
      }
      return Annotate(s, absl::StrCat("training step ", p.step + 1));
    }
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
    p.elapsed_seconds = Seconds(d.created);
    const double t = train_seconds + Seconds(t0);
    p.samples_per_second = t > 0 ? samples / t : 0;
    if (on_progress) on_progress(p);
    if (epoch_steps == per_epoch) RETURN_IF_ERROR(end_epoch());
  }
  if (epoch_steps > 0) {  // a run counted in steps (or cancelled) can stop mid-epoch
    train_seconds += Seconds(t0);
    last_epoch_loss = epoch_loss / epoch_steps;
  }
  if (result.state.empty()) result.state = "SUCCEEDED";
  result.steps = p.step;
  result.train_loss = last_epoch_loss;
  result.samples_per_second = train_seconds > 0 ? samples / train_seconds : 0;
  if (!evaluated_last && evaluate && result.state == "SUCCEEDED") {
    ASSIGN_OR_RETURN(EvalResult e, Evaluate(session, d));
    result.test_accuracy = e.accuracy;
    result.test_loss = e.loss;
    result.test_examples = e.examples;
  }
  log->info("job '{}' {}: {} steps, loss {:.4f}, test accuracy {:.4f}, {:.0f} samples/s", job.name(), result.state,
            result.steps, result.train_loss, result.test_accuracy, result.samples_per_second);
  return result;
}

}  // namespace master
}  // namespace weft
