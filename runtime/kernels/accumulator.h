// Accumulator: the parameter server's side of synchronous replicas that
// aggregate the first k of N gradients (StrategySpec.replicas_to_aggregate).
// It lives on the runtime floor because the AccumulateApply and
// AccumulatorStep kernels (kernels/cpu/sync_kernels.cc) run against it; the
// ps task only hosts it in its ResourceMgr.
//
// One accumulator per variable (or variable shard) lives in the ps task's
// ResourceMgr beside the variable. It holds the global step it accepts, the
// running sum of that step's gradients and how many were added. A replica
// reads step() before it reads the variable, computes its gradient, and
// pushes it with that local step:
//   - local step < step(): stale (an apply happened since the replica read
//     the weights): refused, counted in refused(), never applied;
//   - local step == step(): added; the k-th such push applies the mean of
//     the k (through the caller's ApplyFn, under the accumulator's lock),
//     advances the step, clears the sum and releases the parked pushers;
//     the others are parked until then, so a fast replica cannot contribute
//     twice to one step;
//   - local step > step(): a step that was never handed out;
//     FAILED_PRECONDITION.
// A parked push is released with an error by Abort(id) (its step was aborted;
// its gradient is taken back out of the sum, so a retry cannot count twice)
// or by the accumulator's destruction (CANCELLED), so nothing waits forever.
//
// Thread-safety: thread-safe. Waiters are called without the lock held.
#ifndef WEFT_RUNTIME_KERNELS_ACCUMULATOR_H_
#define WEFT_RUNTIME_KERNELS_ACCUMULATOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tensor.h"

namespace weft {

class Accumulator {
 public:
  // Called once per global step by the k-th push, with the mean gradient,
  // under the accumulator's lock; its error fails every pusher of the step
  // (and the step does not advance).
  using ApplyFn = std::function<absl::Status(const Tensor& mean)>;
  // Called once, when the pusher's step has been applied (OK) or with the
  // reason it never will be.
  using Waiter = std::function<void(const absl::Status&)>;

  enum class Outcome {
    kRefused,  // stale: not added
    kParked,   // added; `waiter` is called when the step is applied
    kApplied,  // added as the k-th: the step was applied by this push
  };
  struct PushResult {
    Outcome outcome = Outcome::kRefused;
    int64_t waiter_id = 0;  // kParked: the id to Abort it with
  };

  // `name` is for messages (the variable's); REQUIRES: num_required >= 1.
  Accumulator(std::string name, int num_required);
  ~Accumulator();  // releases parked waiters with CANCELLED
  Accumulator(const Accumulator&) = delete;
  Accumulator& operator=(const Accumulator&) = delete;

  const std::string& name() const { return name_; }
  int num_required() const { return num_required_; }
  int64_t step() const;
  int64_t refused() const;
  int64_t applied() const;  // global steps applied
  int num_parked() const;

  // Adds float32 `grad` computed at `local_step`. On kParked, `waiter` is
  // kept and called later; otherwise it is not used. An error (a shape or
  // dtype other than the step's first gradient, a future step, the apply's
  // failure) is returned and nothing is parked.
  absl::StatusOr<PushResult> Push(int64_t local_step, const Tensor& grad, const ApplyFn& apply, Waiter waiter);

  // Releases parked waiter `id` with `status` (e.g. its step's abort). A
  // waiter already released is left alone.
  void Abort(int64_t id, const absl::Status& status);

  // For tests: waits up to `timeout` for `n` parked pushes; true when seen.
  bool AwaitParked(int n, absl::Duration timeout) const;

 private:
  struct Parked {
    int64_t id;
    Tensor grad;  // shares the pushed gradient's buffer
    Waiter waiter;
  };

  const std::string name_;
  const int num_required_;
  mutable absl::Mutex mu_;
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  Tensor sum_ ABSL_GUARDED_BY(mu_);
  int count_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<Parked> parked_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_ACCUMULATOR_H_
