// The optimizers' attributes, read once at kernel construction by every
// kernel that applies an update: the Apply* kernels of each device
// (training_kernels.h) and the k-of-N AccumulateApply* kernels
// (cpu/sync_kernels.cc), so all of them accept the same attributes and
// report a bad one the same way.
//
// Thread-safety: plain values.
#ifndef WEFT_RUNTIME_KERNELS_OPTIMIZER_PARAMS_H_
#define WEFT_RUNTIME_KERNELS_OPTIMIZER_PARAMS_H_

#include "graph/attr.h"
#include "graph/ops/training_attrs.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace kernels {

// Each Init reads the node's attributes in order and stops at the first
// missing or malformed one, whose error it records on `c` (returning false).

// The learning-rate schedule and weight decay every optimizer has.
// skip_nonfinite: the update does nothing when element 0 of its gradient is
// not finite (a step that overflowed under loss scaling,
// graph/ops/loss_scale_ops.cc).
struct RateParams {
  LrSchedule schedule;
  float weight_decay = 0;
  bool skip_nonfinite = false;

  bool InitRate(OpKernelConstruction* c) {
    return GetAttr(c, ParseLrSchedule(c->def()), &schedule) &&
           GetAttr(c, GetFloatAttrOr(c->def(), "weight_decay", 0.0f), &weight_decay) &&
           GetAttr(c, GetBoolAttrOr(c->def(), "skip_nonfinite", false), &skip_nonfinite);
  }
};

struct GradientDescentParams : RateParams {
  bool Init(OpKernelConstruction* c) { return InitRate(c); }
};

struct MomentumParams : RateParams {
  float momentum = 0;
  bool use_nesterov = false;

  bool Init(OpKernelConstruction* c) {
    return InitRate(c) && GetAttr(c, GetFloatAttr(c->def(), "momentum"), &momentum) &&
           GetAttr(c, GetBoolAttrOr(c->def(), "use_nesterov", false), &use_nesterov);
  }
};

struct AdamParams : RateParams {
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-7f;

  bool Init(OpKernelConstruction* c) {
    return InitRate(c) && GetAttr(c, GetFloatAttr(c->def(), "beta1"), &beta1) &&
           GetAttr(c, GetFloatAttr(c->def(), "beta2"), &beta2) &&
           GetAttr(c, GetFloatAttr(c->def(), "epsilon"), &epsilon);
  }
};

// ApplyMovingAverage's decay, in [0, 1) (the op's shape function checks it).
struct MovingAverageParams {
  float momentum = 0;

  bool Init(OpKernelConstruction* c) { return GetAttr(c, GetFloatAttr(c->def(), "momentum"), &momentum); }
};

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_OPTIMIZER_PARAMS_H_
