// A learning-rate schedule as the optimizer ops carry it (their attributes,
// graph/ops/training_ops.cc; the job's OptimizerSpec.schedule): a plain
// value that host and CUDA code evaluate alike, so an update on either
// device uses the same rate.
//
// The rate of update t (t = 1, 2, ...):
//   t <= warmup_steps:  learning_rate * t / warmup_steps
//   after, with s = t - warmup_steps - 1 steps of decay:
//     kNone:    learning_rate
//     kCosine:  learning_rate * (alpha + (1 - alpha) (1 + cos(pi min(s, decay_steps) / decay_steps)) / 2)
//     kStep:    learning_rate * factor^floor(s / decay_steps)
//
// Thread-safety: a plain value.
#ifndef WEFT_GRAPH_OPS_LR_SCHEDULE_H_
#define WEFT_GRAPH_OPS_LR_SCHEDULE_H_

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define WEFT_HOST_DEVICE __host__ __device__
#else
#define WEFT_HOST_DEVICE
#endif

namespace weft {

struct LrSchedule {
  enum Decay : int32_t { kNone = 0, kCosine = 1, kStep = 2 };

  float learning_rate = 0;
  int64_t warmup_steps = 0;
  int32_t decay = kNone;
  int64_t decay_steps = 0;  // kCosine: its length; kStep: the interval
  float alpha = 0;          // kCosine: the final fraction
  float factor = 0.1f;      // kStep: the multiplier per interval

  // Whether the rate depends on t (an update then needs its count).
  WEFT_HOST_DEVICE bool varies() const { return warmup_steps > 0 || decay != kNone; }

  WEFT_HOST_DEVICE double At(double t) const {
    const double lr = learning_rate;
    if (warmup_steps > 0 && t <= static_cast<double>(warmup_steps)) return lr * t / static_cast<double>(warmup_steps);
    const double s = t - static_cast<double>(warmup_steps) - 1.0;
    if (decay == kCosine && decay_steps > 0) {
      const double d = static_cast<double>(decay_steps);
      const double p = (s < d ? s : d) / d;
      const double a = alpha;
      return lr * (a + (1.0 - a) * 0.5 * (1.0 + cos(3.14159265358979323846 * p)));
    }
    if (decay == kStep && decay_steps > 0) {
      return lr * pow(static_cast<double>(factor), floor(s / static_cast<double>(decay_steps)));
    }
    return lr;
  }
};

}  // namespace weft

#endif  // WEFT_GRAPH_OPS_LR_SCHEDULE_H_
