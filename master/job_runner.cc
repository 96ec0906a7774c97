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

// LocalTrainer's loop (runtime/training_loop.h), with steps run through the
// session.
absl::StatusOr<TrainResult> JobRunner::Train(MasterSession* session, const Data& d,
                                             const std::function<void(const TrainProgress&)>& on_progress) {
  Logger("master")->info("job '{}' runs on {} device(s)", job_.name(), session->devices().size());
  const std::vector<std::string> fetches = {training_.loss};
  const std::vector<std::string> targets = {training_.train_op};
  TrainingLoopHooks hooks;
  hooks.step = [&, out = std::vector<Tensor>()](const data::Batch& batch) mutable -> absl::StatusOr<float> {
    RETURN_IF_ERROR(
        session->Run({{training_.features, batch.features}, {training_.labels, batch.labels}}, fetches, targets, &out));
    return out[0].data<float>()[0];
  };
  std::vector<std::string> eval_fetches = {training_.correct};
  if (!training_.eval_loss.empty()) eval_fetches.push_back(training_.eval_loss);
  if (d.can_evaluate) {
    hooks.eval_batch = [&, out = std::vector<Tensor>()](
                           const data::Batch& batch) mutable -> absl::StatusOr<std::pair<double, double>> {
      if (cancelled_.load()) return absl::CancelledError("job cancelled during evaluation");
      RETURN_IF_ERROR(session->Run({{training_.features, batch.features}, {training_.labels, batch.labels}},
                                   eval_fetches, {}, &out));
      return std::make_pair(static_cast<double>(out[0].data<float>()[0]),
                            out.size() > 1 ? static_cast<double>(out[1].data<float>()[0]) : 0.0);
    };
  }
  hooks.on_progress = on_progress;
  hooks.cancelled = &cancelled_;
  return RunTrainingLoop(job_, d.train, d.test, hooks, d.created);
}

}  // namespace master
}  // namespace weft
