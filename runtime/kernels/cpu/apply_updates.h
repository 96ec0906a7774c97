// The optimizer update rules of the Apply* kernels (training_kernels.cc),
// shared with the parameter server's accumulators (sync_kernels.cc), which
// apply the mean of k replicas' gradients with the same math.
//
// Each function updates `n` floats in place; the caller holds the variable's
// UpdateLock, so concurrent updates of one variable never interleave (reads
// by other steps are not blocked, as in Hogwild).
#ifndef WEFT_RUNTIME_KERNELS_CPU_APPLY_UPDATES_H_
#define WEFT_RUNTIME_KERNELS_CPU_APPLY_UPDATES_H_

#include <array>
#include <cmath>
#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "common/tensor.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/optimizer_params.h"

namespace weft {
namespace cpu {

// The optimizers' attributes (optimizer_params.h).
using kernels::AdamParams;
using kernels::GradientDescentParams;
using kernels::MomentumParams;

// Held while an update writes its variable and slots. One set of stripes per
// process (an inline function's static), chosen by the variable's buffer.
class UpdateLock {
 public:
  explicit UpdateLock(const Tensor& var) : mu_(&Stripe(var.raw_data())) { mu_->Lock(); }
  ~UpdateLock() { mu_->Unlock(); }
  UpdateLock(const UpdateLock&) = delete;
  UpdateLock& operator=(const UpdateLock&) = delete;

 private:
  static absl::Mutex& Stripe(const void* p) {
    static std::array<absl::Mutex, 64> stripes;
    const auto key = reinterpret_cast<uintptr_t>(p) >> 6;  // buffers are 64-byte aligned
    return stripes[(key ^ (key >> 7) ^ (key >> 13)) % stripes.size()];
  }
  absl::Mutex* mu_;
};

// var = momentum var + (1 - momentum) value
inline void MovingAverageUpdate(OpKernelContext* ctx, const kernels::MovingAverageParams& p, int64_t n, float* var,
                                const float* value) {
  const float m = p.momentum, w = 1.0f - p.momentum;
  ParallelFor(ctx, n, 3, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) var[i] = m * var[i] + w * value[i];
  });
}

// The rate of this update: with the update count `t` (nullptr: none), t is
// incremented first and the schedule read at the new count.
inline float NextRate(const kernels::RateParams& p, float* t) {
  if (t == nullptr) return p.schedule.learning_rate;
  *t += 1.0f;
  return static_cast<float>(p.schedule.At(*t));
}

// var -= lr * (grad + weight_decay var)
inline void GradientDescentUpdate(OpKernelContext* ctx, const GradientDescentParams& p, int64_t n, float* var,
                                  float* t, const float* grad) {
  const float lr = NextRate(p, t), wd = p.weight_decay;
  ParallelFor(ctx, n, 2, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) var[i] -= lr * (grad[i] + wd * var[i]);
  });
}

// g = grad + weight_decay var; accum = accum * momentum + g;
// var -= lr * accum (or, Nesterov, var -= lr * (g + momentum * accum)).
inline void MomentumUpdate(OpKernelContext* ctx, const MomentumParams& p, int64_t n, float* var, float* accum,
                           float* t, const float* grad) {
  const float lr = NextRate(p, t), mu = p.momentum, wd = p.weight_decay;
  const bool nesterov = p.use_nesterov;
  ParallelFor(ctx, n, 4, [&](int64_t begin, int64_t end) {
    if (nesterov) {
      for (int64_t i = begin; i < end; ++i) {
        const float g = grad[i] + wd * var[i];
        accum[i] = accum[i] * mu + g;
        var[i] -= lr * (g + mu * accum[i]);
      }
    } else {
      for (int64_t i = begin; i < end; ++i) {
        accum[i] = accum[i] * mu + grad[i] + wd * var[i];
        var[i] -= lr * accum[i];
      }
    }
  });
}

// t += 1 (one per call: the update count of the schedule and the bias
// correction), then var *= 1 - lr(t) weight_decay (AdamW's decoupled
// decay), m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
// var -= lr(t) sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps).
inline void AdamUpdate(OpKernelContext* ctx, const AdamParams& p, int64_t n, float* var, float* m, float* v,
                       float* t, const float* grad) {
  *t += 1.0f;
  const double step = *t;
  const double rate = p.schedule.At(step);
  const float lr_t = static_cast<float>(rate * std::sqrt(1.0 - std::pow(double{p.beta2}, step)) /
                                        (1.0 - std::pow(double{p.beta1}, step)));
  const float keep = static_cast<float>(1.0 - rate * p.weight_decay);
  const float b1 = p.beta1, b2 = p.beta2, eps = p.epsilon;
  ParallelFor(ctx, n, 10, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float g = grad[i];
      m[i] = b1 * m[i] + (1.0f - b1) * g;
      v[i] = b2 * v[i] + (1.0f - b2) * g * g;
      var[i] = keep * var[i] - lr_t * m[i] / (std::sqrt(v[i]) + eps);
    }
  });
}

}  // namespace cpu
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_CPU_APPLY_UPDATES_H_
