// The optimizer ops' kernels (ApplyGradientDescent, ApplyMomentum,
// ApplyAdam, and ApplyMovingAverage: graph/ops/training_ops.cc), written once for every device as
// in math_kernels.h: each class template reads the optimizer's attributes
// (optimizer_params.h) at construction, checks the operands against the
// variable (nn_checks.h), hands them to `Impl`, the device's update
// (cpu/training_kernels.cc, cuda/gpu_training_kernels.cc), and forwards the
// updated variable as output 0.
//
// Impl is a member, constructed with the kernel's OpKernelConstruction
// after the attributes were read (a device may keep state per kernel, as
// the GPU's ApplyAdam does), with
//   void Run(OpKernelContext* ctx, const Params& p)
// which updates input 0 (and the slots) in place, or reports an error
// through ctx. A step pays the one virtual call of OpKernel::Compute and
// nothing per element.
//
// Thread-safety: kernels are immutable after construction; Compute may run
// concurrently (an Impl serialises updates of one variable itself).
#ifndef WEFT_RUNTIME_KERNELS_TRAINING_KERNELS_H_
#define WEFT_RUNTIME_KERNELS_TRAINING_KERNELS_H_

#include <initializer_list>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/tensor.h"
#include "runtime/kernels/nn_checks.h"
#include "runtime/kernels/optimizer_params.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace kernels {

// Optimizer Ops: Params (their attributes), the operands that must have
// var's shape, and Check for the rest of the inputs.
// The update count t, when input `i` holds it: a float32 scalar.
inline absl::Status CheckCount(OpKernelContext* ctx, int i) {
  const Tensor& t = ctx->input(i);
  if (t.dtype() != DType::kFloat32 || t.NumElements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("t must be a float32 scalar, got ", DTypeName(t.dtype()), t.shape().DebugString()));
  }
  return absl::OkStatus();
}

// An update with `slots` slot variables, an optional t, and the gradient
// last.
inline absl::Status CheckScheduled(OpKernelContext* ctx, int slots, std::initializer_list<std::pair<int, const char*>> like) {
  const int n = ctx->num_inputs();
  if (n != slots + 2 && n != slots + 3) {
    return absl::InvalidArgumentError(absl::StrCat("takes ", slots + 2, " or ", slots + 3, " inputs, got ", n));
  }
  if (n == slots + 3) {
    if (absl::Status s = CheckCount(ctx, slots + 1); !s.ok()) return s;
  }
  if (absl::Status s = CheckLikeVar(ctx, like); !s.ok()) return s;
  return CheckLikeVar(ctx, {{n - 1, "grad"}});
}

// Optimizer Ops: Params (their attributes), the operands that must have
// var's shape, and Check for the rest of the inputs.
struct GradientDescentOp {
  using Params = GradientDescentParams;
  static absl::Status Check(OpKernelContext* ctx) { return CheckScheduled(ctx, 0, {}); }
};

struct MomentumOp {
  using Params = MomentumParams;
  static absl::Status Check(OpKernelContext* ctx) { return CheckScheduled(ctx, 1, {{1, "accum"}}); }
};

struct AdamOp {
  using Params = AdamParams;
  static absl::Status Check(OpKernelContext* ctx) {
    if (absl::Status s = CheckLikeVar(ctx, {{1, "m"}, {2, "v"}, {4, "grad"}}); !s.ok()) return s;
    return CheckCount(ctx, 3);
  }
};

struct MovingAverageOp {
  using Params = MovingAverageParams;
  static absl::Status Check(OpKernelContext* ctx) { return CheckLikeVar(ctx, {{1, "value"}}); }
};

template <typename Op, typename Impl>
class ApplyKernel : public OpKernel {
 public:
  explicit ApplyKernel(OpKernelConstruction* c) : OpKernel(c), p_(ReadParams(c)), impl_(c) {}
  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, Op::Check(ctx));
    impl_.Run(ctx, p_);
    if (!ctx->status().ok()) return;
    ctx->set_output(0, ctx->input(0));
  }

 private:
  static typename Op::Params ReadParams(OpKernelConstruction* c) {
    typename Op::Params p;
    p.Init(c);
    return p;
  }

  const typename Op::Params p_;
  Impl impl_;
};

// GlobalNormScale(g_1, ..., g_n) -> (scale, norm) (graph/ops/clip_ops.cc):
// reads clip_norm, checks the gradients are float32, allocates the two
// scalars and hands them to Impl:
//   void Run(OpKernelContext* ctx, float clip_norm, Tensor* scale, Tensor* norm)
template <typename Impl>
class GlobalNormScaleKernel : public OpKernel {
 public:
  explicit GlobalNormScaleKernel(OpKernelConstruction* c) : OpKernel(c), impl_(c) {
    GetAttr(c, GetFloatAttr(c->def(), "clip_norm"), &clip_norm_);
  }
  void Compute(OpKernelContext* ctx) override {
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      OP_REQUIRES(ctx, ctx->input(i).dtype() == DType::kFloat32,
                  absl::InvalidArgumentError(absl::StrCat("gradient ", i, " must be float32, got ",
                                                          DTypeName(ctx->input(i).dtype()))));
    }
    Tensor* scale = ctx->allocate_output(0, DType::kFloat32, TensorShape());
    Tensor* norm = ctx->allocate_output(1, DType::kFloat32, TensorShape());
    if (scale == nullptr || norm == nullptr) return;
    impl_.Run(ctx, clip_norm_, scale, norm);
  }

 private:
  float clip_norm_ = 0;
  Impl impl_;
};

// A float32 scalar at input i, named `role` in the error.
inline absl::Status CheckScalar(OpKernelContext* ctx, int i, const char* role) {
  const Tensor& t = ctx->input(i);
  if (t.dtype() != DType::kFloat32 || t.shape().rank() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(role, " must be a float32 scalar, got ", DTypeName(t.dtype()),
                                                   t.shape().DebugString()));
  }
  return absl::OkStatus();
}

// UnscaleGradients(scale, g_1, ..., g_n) -> (u_1, ..., u_n, overflow)
// (graph/ops/loss_scale_ops.cc): checks the operands, allocates the outputs
// and hands them to Impl:
//   void Run(OpKernelContext* ctx, const std::vector<Tensor*>& unscaled, Tensor* overflow)
template <typename Impl>
class UnscaleGradientsKernel : public OpKernel {
 public:
  explicit UnscaleGradientsKernel(OpKernelConstruction* c) : OpKernel(c), impl_(c) {}
  void Compute(OpKernelContext* ctx) override {
    const int n = ctx->num_inputs();
    OP_REQUIRES(ctx, n >= 2, absl::InvalidArgumentError("takes the scale and at least one gradient"));
    OP_REQUIRES_OK(ctx, CheckScalar(ctx, 0, "scale"));
    std::vector<Tensor*> unscaled(n - 1);
    for (int i = 1; i < n; ++i) {
      const Tensor& g = ctx->input(i);
      OP_REQUIRES(ctx, g.dtype() == DType::kFloat32,
                  absl::InvalidArgumentError(absl::StrCat("gradient ", i - 1, " must be float32, got ",
                                                          DTypeName(g.dtype()))));
      unscaled[i - 1] = ctx->allocate_output(i - 1, DType::kFloat32, g.shape());
      if (unscaled[i - 1] == nullptr) return;
    }
    Tensor* overflow = ctx->allocate_output(n - 1, DType::kFloat32, TensorShape());
    if (overflow == nullptr) return;
    impl_.Run(ctx, unscaled, overflow);
  }

 private:
  Impl impl_;
};

// ApplyLossScale(scale, good_steps, overflow) -> scale: reads
// growth_interval, checks the three scalars and calls
//   void Run(OpKernelContext* ctx, float growth_interval)
// which updates inputs 0 and 1 in place; forwards scale as output 0.
template <typename Impl>
class ApplyLossScaleKernel : public OpKernel {
 public:
  explicit ApplyLossScaleKernel(OpKernelConstruction* c) : OpKernel(c), impl_(c) {
    int64_t interval = 0;
    if (!GetAttr(c, GetIntAttr(c->def(), "growth_interval"), &interval)) return;
    if (interval <= 0) {
      c->SetStatus(absl::InvalidArgumentError(absl::StrCat("growth_interval must be positive, got ", interval)));
      return;
    }
    interval_ = static_cast<float>(interval);
  }
  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, CheckScalar(ctx, 0, "scale"));
    OP_REQUIRES_OK(ctx, CheckScalar(ctx, 1, "good_steps"));
    OP_REQUIRES_OK(ctx, CheckScalar(ctx, 2, "overflow"));
    impl_.Run(ctx, interval_);
    if (!ctx->status().ok()) return;
    ctx->set_output(0, ctx->input(0));
  }

 private:
  float interval_ = 1;
  Impl impl_;
};

// The loss scale after one step (ApplyLossScale's rule; the CPU kernel's,
// and training.cu's ApplyLossScaleKernel follows it, checked against it by
// gpu_kernels_test): `overflow` not finite halves it (not below 1) and
// restarts the count of good steps; the growth_interval-th good step in a
// row doubles it.
inline void NextLossScale(bool overflow, float interval, float* scale, float* good_steps) {
  if (overflow) {
    *scale = *scale * 0.5f < 1.0f ? 1.0f : *scale * 0.5f;
    *good_steps = 0;
    return;
  }
  const float good = *good_steps + 1.0f;
  if (good >= interval) {
    const float grown = *scale * 2.0f;
    if (grown <= 3.4028235e38f) *scale = grown;
    *good_steps = 0;
  } else {
    *good_steps = good;
  }
}

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_TRAINING_KERNELS_H_
