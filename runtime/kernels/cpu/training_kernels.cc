// CPU kernels for the optimizer updates (graph/ops/training_ops.cc). Each
// writes into its variable inputs' buffers, which are the variables' own, and
// forwards `var` as output 0.
//
// Updates of one variable from concurrent steps (asynchronous replicas on a
// parameter server) are serialised by a lock chosen by the variable's buffer,
// so no update is lost; reads by other steps are not blocked (a replica may
// read a variable halfway through another's update, as in Hogwild). The
// update rules themselves are in apply_updates.h.
#include "absl/strings/str_cat.h"
#include "runtime/kernels/cpu/apply_updates.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/cpu/nn_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

// A writable alias of input i: the copy shares (and so writes through to) the
// variable's buffer.
float* Mutable(OpKernelContext* ctx, int i) {
  Tensor alias = ctx->input(i);
  return alias.data<float>();
}

class ApplyGradientDescentOp : public OpKernel {
 public:
  explicit ApplyGradientDescentOp(OpKernelConstruction* c) : OpKernel(c) {
    GetAttr(c, GetFloatAttr(c->def(), "learning_rate"), &p_.learning_rate);
  }
  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, CheckLikeVar(ctx, {{1, "grad"}}));
    UpdateLock lock(ctx->input(0));
    GradientDescentUpdate(ctx, p_, ctx->input(0).NumElements(), Mutable(ctx, 0), ctx->input(1).data<float>());
    ctx->set_output(0, ctx->input(0));
  }

 private:
  GradientDescentParams p_;
};

class ApplyMomentumOp : public OpKernel {
 public:
  explicit ApplyMomentumOp(OpKernelConstruction* c) : OpKernel(c) {
    if (!GetAttr(c, GetFloatAttr(c->def(), "learning_rate"), &p_.learning_rate)) return;
    if (!GetAttr(c, GetFloatAttr(c->def(), "momentum"), &p_.momentum)) return;
    GetAttr(c, GetBoolAttrOr(c->def(), "use_nesterov", false), &p_.use_nesterov);
  }
  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, CheckLikeVar(ctx, {{1, "accum"}, {2, "grad"}}));
    UpdateLock lock(ctx->input(0));
    MomentumUpdate(ctx, p_, ctx->input(0).NumElements(), Mutable(ctx, 0), Mutable(ctx, 1),
                   ctx->input(2).data<float>());
    ctx->set_output(0, ctx->input(0));
  }

 private:
  MomentumParams p_;
};

class ApplyAdamOp : public OpKernel {
 public:
  explicit ApplyAdamOp(OpKernelConstruction* c) : OpKernel(c) {
    if (!GetAttr(c, GetFloatAttr(c->def(), "learning_rate"), &p_.learning_rate)) return;
    if (!GetAttr(c, GetFloatAttr(c->def(), "beta1"), &p_.beta1)) return;
    if (!GetAttr(c, GetFloatAttr(c->def(), "beta2"), &p_.beta2)) return;
    GetAttr(c, GetFloatAttr(c->def(), "epsilon"), &p_.epsilon);
  }
  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, CheckLikeVar(ctx, {{1, "m"}, {2, "v"}, {4, "grad"}}));
    const Tensor& t_in = ctx->input(3);
    OP_REQUIRES(ctx, t_in.dtype() == DType::kFloat32 && t_in.NumElements() == 1,
                absl::InvalidArgumentError(absl::StrCat("t must be a float32 scalar, got ", DTypeName(t_in.dtype()),
                                                        t_in.shape().DebugString())));
    UpdateLock lock(ctx->input(0));
    AdamUpdate(ctx, p_, ctx->input(0).NumElements(), Mutable(ctx, 0), Mutable(ctx, 1), Mutable(ctx, 2),
               Mutable(ctx, 3), ctx->input(4).data<float>());
    ctx->set_output(0, ctx->input(0));
  }

 private:
  AdamParams p_;
};

WEFT_REGISTER_KERNEL("ApplyGradientDescent", "CPU", ApplyGradientDescentOp);
WEFT_REGISTER_KERNEL("ApplyMomentum", "CPU", ApplyMomentumOp);
WEFT_REGISTER_KERNEL("ApplyAdam", "CPU", ApplyAdamOp);

}  // namespace
}  // namespace cpu
}  // namespace weft
