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

}  // namespace

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

TrainingLoopHooks LocalTrainer::Hooks(const std::function<void(const TrainProgress&)>& on_progress) {
  TrainingLoopHooks hooks;
  hooks.step = [this, out = std::vector<Tensor>(), step_id = int64_t{0}](
                   const data::Batch& batch) mutable -> absl::StatusOr<float> {
    const Tensor feeds[] = {batch.features, batch.labels};
    RETURN_IF_ERROR(s_->train_step->Run(feeds, &out, step_id++));
    return out[0].data<float>()[0];
  };
  if (s_->eval_step != nullptr) {
    hooks.eval_batch = [this, out = std::vector<Tensor>()](
                           const data::Batch& batch) mutable -> absl::StatusOr<std::pair<double, double>> {
      const Tensor feeds[] = {batch.features, batch.labels};
      RETURN_IF_ERROR(s_->eval_step->Run(feeds, &out));
      return std::make_pair(static_cast<double>(out[0].data<float>()[0]),
                            out.size() > 1 ? static_cast<double>(out[1].data<float>()[0]) : 0.0);
    };
  }
  hooks.on_progress = on_progress;
  hooks.cancelled = &cancelled_;
  return hooks;
}

absl::StatusOr<EvalResult> LocalTrainer::Evaluate() {
  if (s_->eval_step == nullptr) return absl::FailedPreconditionError("the model has no accuracy output to evaluate");
  return EvaluateDataset(s_->job, s_->test_data, Hooks(nullptr));
}

absl::StatusOr<TrainResult> LocalTrainer::Train(const std::function<void(const TrainProgress&)>& on_progress) {
  return RunTrainingLoop(s_->job, s_->train_data, s_->test_data, Hooks(on_progress), s_->created);
}

}  // namespace weft
