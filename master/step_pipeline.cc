#include "master/step_pipeline.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

namespace weft {
namespace master {

int64_t AutoStepsPerDispatch::Next() const {
  if (step_seconds_ <= 0) return 1;
  const double n = absl::ToDoubleSeconds(kTarget) / step_seconds_;
  return std::clamp<int64_t>(static_cast<int64_t>(n), 1, kMaxSteps);
}

void AutoStepsPerDispatch::Ended(int64_t steps, absl::Time issued, absl::Time now) {
  // A pipelined dispatch starts running when the one before it ends.
  const absl::Time start = std::max(issued, last_end_);
  last_end_ = now;
  if (steps <= 0 || now <= start) return;
  const double per_step = absl::ToDoubleSeconds(now - start) / static_cast<double>(steps);
  step_seconds_ = step_seconds_ <= 0 ? per_step : 0.75 * step_seconds_ + 0.25 * per_step;
}

StepPipeline::StepPipeline(MasterSession* session, std::vector<std::string> fetches,
                           std::vector<std::string> targets, int depth)
    : session_(session),
      fetches_(std::move(fetches)),
      targets_(std::move(targets)),
      depth_(std::max(depth, 1)),
      slots_(depth_) {}

StepPipeline::~StepPipeline() { WaitAll().IgnoreError(); }

bool StepPipeline::Issue(int iterations) {
  const int64_t k = issued_;
  {
    absl::MutexLock lock(&mu_);
    Slot& slot = slots_[k % depth_];
    slot.ended = false;
    slot.iterations = iterations;
    slot.issued = absl::Now();
  }
  const bool started = session_->RunAsync(
      {}, fetches_, targets_, iterations,
      [this, k](absl::Status s, std::vector<Tensor> values) {
        absl::MutexLock lock(&mu_);
        Slot& slot = slots_[k % depth_];
        slot.status = std::move(s);
        slot.fetched = std::move(values);
        slot.ended = true;
      },
      /*after_previous=*/depth_ > 1);
  if (!started) return false;
  ++issued_;
  pending_steps_ += iterations;
  return true;
}

StepPipeline::Result StepPipeline::Take() {
  Result r;
  {
    absl::MutexLock lock(&mu_);
    Slot& slot = slots_[taken_ % depth_];
    mu_.Await(absl::Condition(&slot.ended));
    r.status = std::move(slot.status);
    slot.status = absl::OkStatus();
    r.fetched.swap(slot.fetched);
    r.iterations = slot.iterations;
    r.issued = slot.issued;
  }
  ++taken_;
  pending_steps_ -= r.iterations;
  return r;
}

absl::Status StepPipeline::WaitAll() {
  absl::Status first;
  absl::MutexLock lock(&mu_);
  for (int64_t k = taken_; k < issued_; ++k) {
    Slot& slot = slots_[k % depth_];
    mu_.Await(absl::Condition(&slot.ended));
    if (first.ok()) first = slot.status;
  }
  return first;
}

}  // namespace master
}  // namespace weft
