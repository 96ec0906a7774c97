#include "master/job_runner.h"

#include "master/distributed_job.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "runtime/data/dataset.h"
#if WEFT_WITH_NCCL
#include "runtime/gpu/nccl_communicators.h"
#endif

namespace weft {
namespace master {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// The NCCL unique ids of all-reduce groups on GPUs. Made here because the
// maker hosts NCCL's bootstrap root until every rank has joined, and the
// master outlives the job's workers' setup; a build without NCCL makes none.
NcclIdGenerator NcclIdsOfThisBuild() {
#if WEFT_WITH_NCCL
  return [] { return gpu::NewNcclUniqueId(); };
#else
  return nullptr;
#endif
}

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
  if (job_.strategy().kind() != StrategySpec::NONE) return RunDistributed(on_progress);
  if (job_.strategy().replicas_to_aggregate() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job '", job_.name(), "': strategy replicas_to_aggregate ", job_.strategy().replicas_to_aggregate(),
        " applies to kind PARAMETER_SERVER with sync: true only, and the job has no strategy kind"));
  }
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

// A job with a strategy: the replicated graph, each replica reading its
// shard on its task; sync steps run every replica at once, async replicas
// each run their own steps on a thread, as fast as they go, and so do k-of-N
// sync replicas, whose job steps are the ps's global steps.
absl::StatusOr<TrainResult> JobRunner::RunDistributed(const std::function<void(const TrainProgress&)>& on_progress) {
  const Clock::time_point created = Clock::now();
  ASSIGN_OR_RETURN(std::vector<DeviceAttributes> attrs, ListClusterDevices(workers_));
  std::vector<std::string> devices;
  for (const DeviceAttributes& a : attrs) devices.push_back(a.name());
  NcclIdGenerator nccl_ids = NcclIdsOfThisBuild();
  if (nccl_ids != nullptr) {
    const std::string why_not = WhyNotNccl(attrs);
    if (!why_not.empty()) {
      Logger("master")->info("job '{}': no NCCL: {}; GPU all-reduces take the gRPC ring", job_.name(), why_not);
      nccl_ids = nullptr;
    }
  }
  ASSIGN_OR_RETURN(DistributedPlan plan, PlanDistributedJob(job_, training_, devices, nccl_ids));
  if (plan.replicated.num_nccl_groups > 0) {
    Logger("master")->info("job '{}': {} all-reduce group(s) on GPUs reduce through NCCL", job_.name(),
                           plan.replicated.num_nccl_groups);
  }
  if (!plan.replicated.nccl_id_status.ok()) {
    Logger("master")->warn("job '{}': {}; those GPUs all-reduce through host copies and the gRPC ring instead",
                           job_.name(), plan.replicated.nccl_id_status.ToString());
  }
  // The master reads the training split only to count it (the epoch's steps).
  const std::vector<int64_t> shape(training_.example_shape.dims().begin(), training_.example_shape.dims().end());
  const int64_t num_classes = job_.has_model() ? job_.model().num_classes() : 0;
  ASSIGN_OR_RETURN(data::InMemoryDataset train, data::LoadDataset(job_.dataset(), /*train=*/true, shape, num_classes));
  const int64_t train_examples = train.size();
  train = data::InMemoryDataset();
  if (cancelled_.load()) {
    TrainResult r;
    r.state = "CANCELLED";
    r.job = job_.name();
    r.wall_seconds = Seconds(created);
    return r;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<MasterSession> owned, MasterSession::Create(session_handle_, plan.graph, workers_));
  MasterSession* session = owned.get();
  {
    absl::MutexLock lock(&mu_);
    session_ = std::move(owned);
  }
  Logger("master")->info("job '{}': {} with {} replica(s) of batch {}", job_.name(),
                         StrategySpec::Kind_Name(job_.strategy().kind()), plan.num_replicas, plan.replica_batch);

  StepSource source;
  source.examples = train_examples;
  // Async replicas take turns in the count: an epoch is the steps that
  // together see each example once. A global step of k-of-N replicas trains
  // on k replicas' batches.
  const int k = plan.replicas_to_aggregate;
  const int64_t step_examples = k > 0 ? k * plan.replica_batch : plan.sync ? job_.batch_size() : plan.replica_batch;
  const int64_t replica_steps = (train_examples / plan.num_replicas) / plan.replica_batch * plan.num_replicas;
  source.batches_per_epoch = k > 0 ? replica_steps / k : plan.sync ? replica_steps / plan.num_replicas : replica_steps;
  const ReplicatedGraph& rg = plan.replicated;
  std::unique_ptr<AsyncReplicas> async;
  std::unique_ptr<AccumulatingReplicas> accumulating;
  if (k > 0) {
    Logger("master")->info("job '{}': the ps applies the first {} of {} replicas' gradients per global step",
                           job_.name(), k, plan.num_replicas);
    const int64_t total = job_.steps() > 0 ? job_.steps() : source.batches_per_epoch * job_.epochs();
    accumulating = std::make_unique<AccumulatingReplicas>(session, rg, total, step_examples, &cancelled_);
    source.step = [&](int64_t) { return accumulating->Next(); };
  } else if (plan.sync) {
    // Each replica's loss from its own task, averaged here, and the step's
    // targets on the tasks that run them: no extra tensor crosses tasks.
    // With steps_per_execution k, one RunGraph runs up to k steps on every
    // task (each reads its next batch itself) and the master's round trip
    // is paid once per k steps.
    std::vector<std::string> losses;
    for (const ReplicaNames& r : rg.replicas) losses.push_back(r.loss);
    const int64_t k = std::max(1, job_.strategy().steps_per_execution());
    source.step = [&, k, losses, out = std::vector<Tensor>()](int64_t max_steps) mutable -> absl::StatusOr<StepResult> {
      const int64_t n = std::min(k, max_steps);
      RETURN_IF_ERROR(session->Run({}, losses, rg.train_targets, &out, static_cast<int>(n)));
      double sum = 0;
      for (const Tensor& t : out) sum += t.data<float>()[0];
      return StepResult{static_cast<float>(sum / static_cast<double>(out.size())), n * step_examples, n};
    };
  } else {
    const int64_t total = job_.steps() > 0 ? job_.steps() : source.batches_per_epoch * job_.epochs();
    async = std::make_unique<AsyncReplicas>(session, rg, total, step_examples,
                                            std::max(1, job_.strategy().steps_per_execution()), &cancelled_);
    source.step = [&](int64_t max_steps) { return async->Next(max_steps); };
  }
  if (!plan.eval_correct.empty()) {
    source.evaluate = [&, out = std::vector<Tensor>()]() mutable -> absl::StatusOr<EvalResult> {
      std::vector<std::string> fetches = {plan.eval_labels, plan.eval_correct};
      if (!plan.eval_loss.empty()) fetches.push_back(plan.eval_loss);
      double correct = 0, loss = 0;
      EvalResult e;
      for (;;) {
        if (cancelled_.load()) return absl::CancelledError("job cancelled during evaluation");
        RETURN_IF_ERROR(Annotate(session->Run({}, fetches, {}, &out), "evaluation"));
        const int64_t n = out[0].NumElements();
        if (n == 0) break;  // the end of the test pass
        correct += out[1].data<float>()[0];
        if (out.size() > 2) loss += out[2].data<float>()[0];
        e.examples += n;
      }
      if (e.examples > 0) {
        e.accuracy = correct / static_cast<double>(e.examples);
        e.loss = loss / static_cast<double>(e.examples);
      }
      return e;
    };
  }
  absl::StatusOr<TrainResult> result = RunTrainingLoop(job_, source, on_progress, &cancelled_, created);
  async.reset();  // joins the replicas' threads
  if (accumulating != nullptr) {
    const int64_t refused = accumulating->refused(), refused_steps = accumulating->refused_steps();
    accumulating.reset();
    Logger("master")->info(
        "job '{}': the ps refused {} stale gradient(s) of {} replica step(s) (pushed after their global step was "
        "applied)",
        job_.name(), refused, refused_steps);
  }
  {
    absl::MutexLock lock(&mu_);
    owned = std::move(session_);
  }
  absl::Status closed = owned->Close();
  if (!closed.ok()) Logger("master")->warn("job '{}': closing its session: {}", job_.name(), closed.ToString());
  if (result.ok()) result->wall_seconds = Seconds(created);
  return result;
}

JobRunner::AsyncReplicas::AsyncReplicas(MasterSession* session, const ReplicatedGraph& rg, int64_t total_steps,
                                        int64_t step_examples, int64_t steps_per_call,
                                        const std::atomic<bool>* cancelled)
    : session_(session),
      step_examples_(step_examples),
      steps_per_call_(steps_per_call),
      cancelled_(cancelled),
      remaining_(total_steps) {
  for (size_t r = 0; r < rg.replicas.size(); ++r) {
    threads_.emplace_back([this, names = rg.replicas[r]] { Loop(names); });
  }
}

JobRunner::AsyncReplicas::~AsyncReplicas() {
  {
    absl::MutexLock lock(&mu_);
    remaining_ = 0;
  }
  for (std::thread& t : threads_) t.join();
}

void JobRunner::AsyncReplicas::Loop(const ReplicaNames& names) {
  std::vector<Tensor> out;
  for (;;) {
    int64_t n = 0;
    {
      absl::MutexLock lock(&mu_);
      if (remaining_ <= 0 || cancelled_->load()) return;
      n = std::min(steps_per_call_, remaining_);
      remaining_ -= n;  // tickets: exactly total_steps steps run
      ++active_;
    }
    absl::Status s = session_->Run({}, {names.loss}, {names.train_op}, &out, static_cast<int>(n));
    absl::MutexLock lock(&mu_);
    --active_;
    if (!s.ok()) {
      done_.push_back(s);
      remaining_ = 0;  // the first failure ends the job
      return;
    }
    done_.push_back(StepResult{out[0].data<float>()[0], n * step_examples_, n});
  }
}

bool JobRunner::AsyncReplicas::Ready() const {
  return !done_.empty() || cancelled_->load() || (remaining_ <= 0 && active_ == 0);
}

absl::StatusOr<StepResult> JobRunner::AsyncReplicas::Next(int64_t max_steps) {
  absl::MutexLock lock(&mu_);
  // A cancel sets an atomic without this mutex, so wake up to look.
  while (!mu_.AwaitWithTimeout(absl::Condition(this, &AsyncReplicas::Ready), absl::Milliseconds(100))) {
  }
  if (done_.empty()) {
    if (cancelled_->load()) return absl::CancelledError("job cancelled");
    return absl::InternalError("the asynchronous replicas stopped before the job's last step");
  }
  absl::StatusOr<StepResult>& front = done_.front();
  if (front.ok() && front->steps > max_steps && max_steps > 0) {
    // Hand out the part that fits (an epoch ends inside this dispatch).
    StepResult part{front->loss, front->examples / front->steps * max_steps, max_steps};
    front->examples -= part.examples;
    front->steps -= max_steps;
    return part;
  }
  absl::StatusOr<StepResult> r = std::move(front);
  done_.pop_front();
  return r;
}


JobRunner::AccumulatingReplicas::AccumulatingReplicas(MasterSession* session, const ReplicatedGraph& rg,
                                                      int64_t total_steps, int64_t step_examples,
                                                      const std::atomic<bool>* cancelled)
    : session_(session), total_(total_steps), step_examples_(step_examples), cancelled_(cancelled) {
  applies_.assign(rg.replicas.empty() ? 0 : rg.replicas[0].push_outcomes.size(), 0);
  if (total_ <= 0) stopping_ = true;
  for (size_t r = 0; r < rg.replicas.size(); ++r) {
    threads_.emplace_back([this, names = rg.replicas[r]] { Loop(names); });
  }
}

JobRunner::AccumulatingReplicas::~AccumulatingReplicas() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  // A replica whose push waits for pushes that no replica will make any more
  // is parked on the ps until its step is aborted. A replica between its
  // check of stopping_ and its RunGraph can miss one abort, hence the loop.
  for (;;) {
    session_->AbortRunningSteps(absl::CancelledError("the job's last global step is done"));
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(this, &AccumulatingReplicas::Idle), absl::Milliseconds(100))) break;
  }
  for (std::thread& t : threads_) t.join();
}

int64_t JobRunner::AccumulatingReplicas::refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

int64_t JobRunner::AccumulatingReplicas::refused_steps() const {
  absl::MutexLock lock(&mu_);
  return refused_steps_;
}

void JobRunner::AccumulatingReplicas::Loop(const ReplicaNames& names) {
  std::vector<std::string> fetches = {names.loss};
  for (const std::string& o : names.push_outcomes) fetches.push_back(o);
  std::vector<Tensor> out;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || cancelled_->load()) return;
      ++active_;
    }
    absl::Status s = session_->Run({}, fetches, {names.train_op}, &out);
    absl::MutexLock lock(&mu_);
    --active_;
    if (!s.ok()) {
      // After the last global step, aborted steps are expected.
      if (!stopping_) done_.push_back(s);
      stopping_ = true;
      return;
    }
    bool accepted = false;
    int64_t refused = 0;
    for (size_t u = 0; u < applies_.size(); ++u) {
      const int64_t outcome = out[1 + u].data<int64_t>()[0];
      if (outcome < 0) ++refused;
      if (outcome >= 0) accepted = true;
      if (outcome > 0) ++applies_[u];
    }
    if (refused > 0) {
      refused_ += refused;
      ++refused_steps_;
      Logger("master")->debug("{}: {} stale gradient(s) refused", names.train_op, refused);
    }
    if (accepted) {
      loss_sum_ += out[0].data<float>()[0];
      ++losses_;
    }
    // A global step is done once every update has applied it.
    const int64_t applied = applies_.empty() ? 0 : *std::min_element(applies_.begin(), applies_.end());
    while (global_steps_ < applied && global_steps_ < total_) {
      ++global_steps_;
      const float loss = losses_ > 0 ? static_cast<float>(loss_sum_ / static_cast<double>(losses_)) : 0.0f;
      done_.push_back(StepResult{loss, step_examples_, 1});
      loss_sum_ = 0;
      losses_ = 0;
    }
    if (global_steps_ >= total_) stopping_ = true;
  }
}

bool JobRunner::AccumulatingReplicas::Ready() const {
  return !done_.empty() || cancelled_->load() || (stopping_ && active_ == 0);
}

absl::StatusOr<StepResult> JobRunner::AccumulatingReplicas::Next() {
  absl::MutexLock lock(&mu_);
  // A cancel sets an atomic without this mutex, so wake up to look.
  while (!mu_.AwaitWithTimeout(absl::Condition(this, &AccumulatingReplicas::Ready), absl::Milliseconds(100))) {
  }
  if (done_.empty()) {
    if (cancelled_->load()) return absl::CancelledError("job cancelled");
    return absl::InternalError("the replicas stopped before the job's last global step");
  }
  absl::StatusOr<StepResult> r = std::move(done_.front());
  done_.pop_front();
  return r;
}

}  // namespace master
}  // namespace weft
