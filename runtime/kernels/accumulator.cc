#include "runtime/kernels/accumulator.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace weft {

Accumulator::Accumulator(std::string name, int num_required) : name_(std::move(name)), num_required_(num_required) {}

Accumulator::~Accumulator() {
  std::vector<Parked> parked;
  {
    absl::MutexLock lock(&mu_);
    parked.swap(parked_);
  }
  const absl::Status gone = absl::CancelledError(
      absl::StrCat("accumulator of '", name_, "' was destroyed before its step was applied"));
  for (Parked& p : parked) p.waiter(gone);
}

int64_t Accumulator::step() const {
  absl::MutexLock lock(&mu_);
  return step_;
}

int64_t Accumulator::refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

int64_t Accumulator::applied() const { return step(); }

int Accumulator::num_parked() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(parked_.size());
}

absl::StatusOr<Accumulator::PushResult> Accumulator::Push(int64_t local_step, const Tensor& grad,
                                                          const ApplyFn& apply, Waiter waiter) {
  std::vector<Parked> release;
  absl::Status applied;
  {
    absl::MutexLock lock(&mu_);
    if (local_step < step_) {
      ++refused_;
      return PushResult{Outcome::kRefused, 0};
    }
    if (local_step > step_) {
      return absl::FailedPreconditionError(absl::StrCat("accumulator of '", name_, "' is at global step ", step_,
                                                        " but got a gradient of step ", local_step,
                                                        ", a step it never handed out"));
    }
    if (grad.dtype() != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat("accumulator of '", name_, "': gradients must be float32, got ",
                                                     DTypeName(grad.dtype())));
    }
    if (count_ == 0) {
      if (!sum_.IsInitialized() || sum_.shape() != grad.shape()) {
        // Allocate, not the throwing constructor: the shape is a peer's.
        absl::StatusOr<Tensor> sum = Tensor::Allocate(DType::kFloat32, grad.shape());
        if (!sum.ok()) return Annotate(sum.status(), absl::StrCat("accumulator of '", name_, "'"));
        sum_ = *std::move(sum);
      }
      std::memcpy(sum_.raw_data(), grad.raw_data(), grad.TotalBytes());
    } else {
      if (grad.shape() != sum_.shape()) {
        return absl::InvalidArgumentError(absl::StrCat("accumulator of '", name_, "': gradient ",
                                                       grad.shape().DebugString(), " differs from step ", step_,
                                                       "'s first gradient ", sum_.shape().DebugString()));
      }
      float* sum = sum_.data<float>();
      const float* g = grad.data<float>();
      for (int64_t i = 0, n = sum_.NumElements(); i < n; ++i) sum[i] += g[i];
    }
    if (++count_ < num_required_) {
      const int64_t id = next_id_++;
      parked_.push_back(Parked{id, grad, std::move(waiter)});
      return PushResult{Outcome::kParked, id};
    }
    // The k-th gradient of the step: apply the mean, then open the next step.
    if (num_required_ > 1) {
      const float scale = 1.0f / static_cast<float>(num_required_);
      float* sum = sum_.data<float>();
      for (int64_t i = 0, n = sum_.NumElements(); i < n; ++i) sum[i] *= scale;
    }
    applied = apply(sum_);
    count_ = 0;
    if (applied.ok()) {
      ++step_;
    } else {
      applied = absl::Status(applied.code(), absl::StrCat("applying global step ", step_, " of '", name_,
                                                          "': ", applied.message()));
    }
    release.swap(parked_);
  }
  for (Parked& p : release) p.waiter(applied);
  if (!applied.ok()) return applied;
  return PushResult{Outcome::kApplied, 0};
}

void Accumulator::Abort(int64_t id, const absl::Status& status) {
  Waiter waiter;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = parked_.begin(); it != parked_.end(); ++it) {
      if (it->id == id) {
        // Its gradient leaves the sum, so a retry of the step cannot count twice.
        float* sum = sum_.data<float>();
        const float* g = it->grad.data<float>();
        for (int64_t i = 0, n = sum_.NumElements(); i < n; ++i) sum[i] -= g[i];
        --count_;
        waiter = std::move(it->waiter);
        parked_.erase(it);
        break;
      }
    }
  }
  if (waiter) waiter(status);
}

bool Accumulator::AwaitParked(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return static_cast<int>(parked_.size()) >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

}  // namespace weft
