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
struct GradientDescentOp {
  using Params = GradientDescentParams;
  static absl::Status Check(OpKernelContext* ctx) { return CheckLikeVar(ctx, {{1, "grad"}}); }
};

struct MomentumOp {
  using Params = MomentumParams;
  static absl::Status Check(OpKernelContext* ctx) { return CheckLikeVar(ctx, {{1, "accum"}, {2, "grad"}}); }
};

struct AdamOp {
  using Params = AdamParams;
  static absl::Status Check(OpKernelContext* ctx) {
    if (absl::Status s = CheckLikeVar(ctx, {{1, "m"}, {2, "v"}, {4, "grad"}}); !s.ok()) return s;
    const Tensor& t = ctx->input(3);
    if (t.dtype() != DType::kFloat32 || t.NumElements() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("t must be a float32 scalar, got ", DTypeName(t.dtype()), t.shape().DebugString()));
    }
    return absl::OkStatus();
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

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_TRAINING_KERNELS_H_
