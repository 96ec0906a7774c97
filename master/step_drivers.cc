#include "master/step_drivers.h"

#include <algorithm>
#include <utility>

#include "common/logging.h"
#include "common/status_macros.h"

namespace weft {
namespace master {

StepCounts CountSteps(const JobSpec& job, int64_t train_examples, int num_replicas, int64_t replica_batch, bool sync,
                      int replicas_to_aggregate) {
  const int64_t k = replicas_to_aggregate;
  StepCounts c;
  c.step_examples = k > 0 ? k * replica_batch : sync ? job.batch_size() : replica_batch;
  // Every replica reads as many batches as the smallest shard holds.
  const int64_t replica_steps = (train_examples / num_replicas) / replica_batch * num_replicas;
  c.batches_per_epoch = k > 0 ? replica_steps / k : sync ? replica_steps / num_replicas : replica_steps;
  // Elastic sync replicas read slices of one order: an epoch's steps do not
  // depend on how many replicas share each global batch. (An async step is
  // one replica's: an epoch is as many of them as above.)
  if (job.has_elastic() && sync) c.batches_per_epoch = train_examples / job.batch_size();
  c.total_steps = job.steps() > 0 ? job.steps() : c.batches_per_epoch * job.epochs();
  return c;
}

std::vector<Signature> TrainingSignatures(const DistributedPlan& plan) {
  const ReplicatedGraph& rg = plan.replicated;
  std::vector<Signature> signatures;
  if (plan.replicas_to_aggregate > 0) {
    for (const ReplicaNames& r : rg.replicas) {
      std::vector<std::string> fetches = {r.loss};
      fetches.insert(fetches.end(), r.push_outcomes.begin(), r.push_outcomes.end());
      signatures.push_back({fetches, ReplicaTargets(r)});
    }
  } else if (plan.sync) {
    std::vector<std::string> losses;
    for (const ReplicaNames& r : rg.replicas) losses.push_back(r.loss);
    signatures.push_back({losses, rg.train_targets});
  } else {
    for (const ReplicaNames& r : rg.replicas) signatures.push_back({{r.loss}, ReplicaTargets(r)});
  }
  return signatures;
}

StepDriver::StepDriver(const JobSpec& job, const DistributedPlan& plan, MasterSession* session,
                       const StepCounts& counts, int64_t start_step, const std::atomic<bool>* cancelled,
                       ReplicaRecovery recover)
    : job_name_(job.name()),
      start_step_(start_step),
      session_(session),
      cancelled_(cancelled),
      steps_per_call_(std::max(1, job.strategy().steps_per_execution())),
      auto_steps_(job.strategy().steps_per_execution() == 0),
      checkpoint_every_(job.checkpoint().dir().empty() ? 0 : job.checkpoint().every_steps()),
      handed_out_(start_step),
      step_examples_(counts.step_examples) {
  const ReplicatedGraph& rg = plan.replicated;
  const int64_t steps = counts.total_steps - start_step;
  const int k = plan.replicas_to_aggregate;
  if (k > 0) {
    Logger("master")->info("job '{}': the ps applies the first {} of {} replicas' gradients per global step",
                           job_name_, k, plan.num_replicas);
    accumulating_ = std::make_unique<AccumulatingReplicas>(session, rg, steps, step_examples_, cancelled);
  } else if (plan.sync) {
    // Each replica's loss from its own task, averaged here, and the step's
    // targets on the tasks that run them: no extra tensor crosses tasks.
    for (const ReplicaNames& r : rg.replicas) losses_.push_back(r.loss);
    targets_ = rg.train_targets;
    const int in_flight = job.strategy().steps_in_flight() > 0 ? job.strategy().steps_in_flight() : 2;
    lockstep_ = std::make_unique<StepPipeline>(session, losses_, targets_, in_flight);
  } else {
    async_ = std::make_unique<AsyncReplicas>(session, rg, plan.replica_tasks, steps, step_examples_,
                                             auto_steps_ ? 0 : steps_per_call_,
                                             cancelled, std::move(recover));
  }
}

StepDriver::~StepDriver() { Stop(); }

absl::StatusOr<StepResult> StepDriver::Step(int64_t max_steps) {
  if (async_ != nullptr) return async_->Next(max_steps);
  if (accumulating_ != nullptr) return accumulating_->Next();
  // With steps_per_execution n, one RunGraph runs up to n steps on every
  // task (each reads its next batch itself) and the master's round trip is
  // paid once per n steps; pipelined, it is hidden behind the steps.
  if (lockstep_ == nullptr) return absl::FailedPreconditionError("the job's steps have stopped");
  StepPipeline& p = *lockstep_;
  while (p.pending() < p.depth() && p.pending_steps() < max_steps && !cancelled_->load()) {
    int64_t n = std::min(auto_steps_ ? auto_.Next() : steps_per_call_, max_steps - p.pending_steps());
    if (checkpoint_every_ > 0) {
      // A checkpoint by steps falls due after the dispatch in flight: it
      // must find nothing running beyond it. No dispatch crosses one.
      const int64_t issued_to = handed_out_ + p.pending_steps();
      if (p.pending() > 0 && issued_to % checkpoint_every_ == 0) break;
      n = std::min(n, checkpoint_every_ - issued_to % checkpoint_every_);
    }
    if (p.Issue(static_cast<int>(n))) {
      ++dispatches_;
      continue;
    }
    if (p.pending() > 0) break;  // the plan is registered once they are taken
    // The signature's first dispatch registers its plan, alone.
    RETURN_IF_ERROR(session_->Run({}, losses_, targets_, &out_, static_cast<int>(n)));
    ++dispatches_;
    handed_out_ += n;
    return Result(n, out_);
  }
  if (p.pending() == 0) return absl::CancelledError("job cancelled");
  StepPipeline::Result r = p.Take();
  if (!r.status.ok()) return r.status;
  if (auto_steps_) auto_.Ended(r.iterations, r.issued, absl::Now());
  handed_out_ += r.iterations;
  return Result(r.iterations, r.fetched);
}

StepResult StepDriver::Result(int64_t steps, const std::vector<Tensor>& losses) const {
  double sum = 0;
  for (const Tensor& t : losses) sum += t.data<float>()[0];
  return StepResult{static_cast<float>(sum / static_cast<double>(losses.size())), steps * step_examples_, steps};
}

absl::Status StepDriver::AtRest(int64_t loop_step, const std::function<absl::Status(int64_t step)>& fn) {
  auto from_start = [&](int64_t completed) { return fn(start_step_ + completed); };
  if (async_ != nullptr) return async_->Quiesce(from_start);
  if (accumulating_ != nullptr) return accumulating_->Quiesce(from_start);
  if (lockstep_ == nullptr) return fn(loop_step);
  RETURN_IF_ERROR(lockstep_->WaitAll());
  return fn(loop_step + lockstep_->pending_steps());
}

void StepDriver::Stop() {
  if (lockstep_ != nullptr && auto_steps_ && dispatches_ > 0) {
    Logger("master")->info("job '{}': {} steps in {} dispatches, {:.1f} per dispatch (steps_per_execution 0: chosen "
                           "for about {} ms each)",
                           job_name_, handed_out_ - start_step_, dispatches_,
                           static_cast<double>(handed_out_ - start_step_) / static_cast<double>(dispatches_),
                           absl::ToInt64Milliseconds(AutoStepsPerDispatch::kTarget));
  }
  lockstep_.reset();  // waits for the dispatches in flight
  async_.reset();  // joins the replicas' threads
  if (accumulating_ != nullptr) {
    const int64_t refused = accumulating_->refused(), refused_steps = accumulating_->refused_steps();
    accumulating_.reset();
    Logger("master")->info(
        "job '{}': the ps refused {} stale gradient(s) of {} replica step(s) (pushed after their global step was "
        "applied)",
        job_name_, refused, refused_steps);
  }
}

}  // namespace master
}  // namespace weft
