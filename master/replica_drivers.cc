#include "master/replica_drivers.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "common/logging.h"

namespace weft {
namespace master {

AsyncReplicas::AsyncReplicas(MasterSession* session, const ReplicatedGraph& rg,
                                        const std::vector<std::string>& tasks, int64_t total_steps,
                                        int64_t step_examples, int64_t steps_per_call,
                                        const std::atomic<bool>* cancelled,
                                        std::function<bool(const absl::Status&, const std::string&)> recover)
    : session_(session),
      total_(total_steps),
      step_examples_(step_examples),
      steps_per_call_(steps_per_call),
      cancelled_(cancelled),
      recover_(std::move(recover)),
      remaining_(total_steps) {
  for (size_t r = 0; r < rg.replicas.size(); ++r) {
    threads_.emplace_back(
        [this, names = rg.replicas[r], task = r < tasks.size() ? tasks[r] : std::string()] { Loop(names, task); });
  }
}

AsyncReplicas::~AsyncReplicas() {
  {
    absl::MutexLock lock(&mu_);
    remaining_ = 0;
    paused_ = false;
  }
  for (std::thread& t : threads_) t.join();
}

void AsyncReplicas::Loop(const ReplicaNames& names, const std::string& task) {
  const std::vector<std::string> fetches = {names.loss};
  const std::vector<std::string> targets = ReplicaTargets(names);
  std::vector<Tensor> out;
  AutoStepsPerDispatch sizer;  // steps_per_call 0: this replica's dispatches
  for (;;) {
    int64_t n = 0;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](AsyncReplicas* self) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !self->paused_ || self->remaining_ <= 0; },
          this));
      if (remaining_ <= 0 || cancelled_->load()) return;
      n = std::min(steps_per_call_ > 0 ? steps_per_call_ : sizer.Next(), remaining_);
      remaining_ -= n;  // tickets: exactly total_steps steps run
      ++active_;
    }
    const absl::Time issued = absl::Now();
    absl::Status s = session_->Run({}, fetches, targets, &out, static_cast<int>(n));
    if (s.ok()) sizer.Ended(n, issued, absl::Now());
    if (!s.ok() && recover_ != nullptr && !cancelled_->load()) {
      {
        // The steps go back to the pool, and a checkpoint (Quiesce) need
        // not wait for this replica's worker to come back.
        absl::MutexLock lock(&mu_);
        --active_;
        remaining_ += n;
      }
      if (recover_(s, task)) continue;
      absl::MutexLock lock(&mu_);
      done_.push_back(s);
      remaining_ = 0;  // the first failure ends the job
      return;
    }
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

absl::Status AsyncReplicas::Quiesce(const std::function<absl::Status(int64_t completed)>& fn) {
  int64_t completed = 0;
  {
    absl::MutexLock lock(&mu_);
    paused_ = true;
    mu_.Await(absl::Condition(+[](int* n) { return *n == 0; }, &active_));
    completed = total_ - remaining_;
  }
  absl::Status s = fn(completed);
  absl::MutexLock lock(&mu_);
  paused_ = false;
  return s;
}

bool AsyncReplicas::holding() const {
  absl::MutexLock lock(&mu_);
  return paused_;
}

bool AsyncReplicas::Ready() const {
  return !done_.empty() || cancelled_->load() || (remaining_ <= 0 && active_ == 0);
}

absl::StatusOr<StepResult> AsyncReplicas::Next(int64_t max_steps) {
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


AccumulatingReplicas::AccumulatingReplicas(MasterSession* session, const ReplicatedGraph& rg,
                                                      int64_t total_steps, int64_t step_examples,
                                                      const std::atomic<bool>* cancelled)
    : session_(session), total_(total_steps), step_examples_(step_examples), cancelled_(cancelled) {
  applies_.assign(rg.replicas.empty() ? 0 : rg.replicas[0].push_outcomes.size(), 0);
  if (total_ <= 0) stopping_ = true;
  for (size_t r = 0; r < rg.replicas.size(); ++r) {
    threads_.emplace_back([this, names = rg.replicas[r]] { Loop(names); });
  }
}

AccumulatingReplicas::~AccumulatingReplicas() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  AbortUntilIdle(absl::CancelledError("the job's last global step is done"));
  for (std::thread& t : threads_) t.join();
}

void AccumulatingReplicas::AbortUntilIdle(const absl::Status& why) {
  for (;;) {
    session_->AbortRunningSteps(why);
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(this, &AccumulatingReplicas::Idle), absl::Milliseconds(100))) return;
  }
}

int64_t AccumulatingReplicas::refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

int64_t AccumulatingReplicas::refused_steps() const {
  absl::MutexLock lock(&mu_);
  return refused_steps_;
}

void AccumulatingReplicas::Loop(const ReplicaNames& names) {
  std::vector<std::string> fetches = {names.loss};
  for (const std::string& o : names.push_outcomes) fetches.push_back(o);
  const std::vector<std::string> targets = ReplicaTargets(names);
  std::vector<Tensor> out;
  for (;;) {
    bool paused_at_start = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](AccumulatingReplicas* self) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !self->paused_ || self->stopping_; },
          this));
      if (stopping_ || cancelled_->load()) return;
      ++active_;
      paused_at_start = paused_;
    }
    absl::Status s = session_->Run({}, fetches, targets, &out);
    absl::MutexLock lock(&mu_);
    --active_;
    if (!s.ok() && paused_ && !paused_at_start) continue;  // aborted for a checkpoint: not applied
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

absl::Status AccumulatingReplicas::Quiesce(const std::function<absl::Status(int64_t completed)>& fn) {
  {
    absl::MutexLock lock(&mu_);
    paused_ = true;
  }
  AbortUntilIdle(absl::AbortedError("held for a checkpoint"));
  int64_t completed = 0;
  {
    absl::MutexLock lock(&mu_);
    completed = global_steps_;
  }
  absl::Status s = fn(completed);
  absl::MutexLock lock(&mu_);
  paused_ = false;
  return s;
}

bool AccumulatingReplicas::Ready() const {
  return !done_.empty() || cancelled_->load() || (stopping_ && active_ == 0);
}

absl::StatusOr<StepResult> AccumulatingReplicas::Next() {
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
