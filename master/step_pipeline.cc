#include "master/step_pipeline.h"

#include <algorithm>
#include <utility>

namespace weft {
namespace master {

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
