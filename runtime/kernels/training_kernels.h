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

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_TRAINING_KERNELS_H_
