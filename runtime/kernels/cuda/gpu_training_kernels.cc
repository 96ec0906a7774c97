// GPU kernels for the optimizer updates (graph/ops/training_ops.cc): one
// launch per variable, writing the variable's device buffer (and slots) in
// place and forwarding `var` as output 0, with the CPU kernels' checks
// (runtime/kernels/cpu/training_kernels.cc).
//
// Every launch goes to the device's one compute stream, so updates of one
// variable from concurrent steps run one after another, as the CPU's update
// lock orders them.
#include "absl/strings/str_cat.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/cpu/nn_checks.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {
namespace {

using cpu::CheckLikeVar;
using cpu::GetAttr;

class ApplyGradientDescentOp : public OpKernel {
 public:
  explicit ApplyGradientDescentOp(OpKernelConstruction* c) : OpKernel(c) {
    GetAttr(c, GetFloatAttr(c->def(), "learning_rate"), &lr_);
  }
  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, CheckLikeVar(ctx, {{1, "grad"}}));
    OP_REQUIRES_CUDA(ctx,
                     LaunchApplyGradientDescent(MutableInput(ctx, 0), ctx->input(1).data<float>(), lr_,
                                                ctx->input(0).NumElements(), Stream(ctx)),
                     "ApplyGradientDescent kernel");
    ctx->set_output(0, ctx->input(0));
  }

 private:
  float lr_ = 0;
};

class ApplyMomentumOp : public OpKernel {
 public:
  explicit ApplyMomentumOp(OpKernelConstruction* c) : OpKernel(c) {
    if (!GetAttr(c, GetFloatAttr(c->def(), "learning_rate"), &lr_)) return;
    if (!GetAttr(c, GetFloatAttr(c->def(), "momentum"), &momentum_)) return;
    GetAttr(c, GetBoolAttrOr(c->def(), "use_nesterov", false), &nesterov_);
  }
  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, CheckLikeVar(ctx, {{1, "accum"}, {2, "grad"}}));
    OP_REQUIRES_CUDA(ctx,
                     LaunchApplyMomentum(MutableInput(ctx, 0), MutableInput(ctx, 1), ctx->input(2).data<float>(), lr_,
                                         momentum_, nesterov_, ctx->input(0).NumElements(), Stream(ctx)),
                     "ApplyMomentum kernel");
    ctx->set_output(0, ctx->input(0));
  }

 private:
  float lr_ = 0;
  float momentum_ = 0;
  bool nesterov_ = false;
};

class ApplyAdamOp : public OpKernel {
 public:
  explicit ApplyAdamOp(OpKernelConstruction* c) : OpKernel(c) {
    if (!GetAttr(c, GetFloatAttr(c->def(), "learning_rate"), &lr_)) return;
    if (!GetAttr(c, GetFloatAttr(c->def(), "beta1"), &beta1_)) return;
    if (!GetAttr(c, GetFloatAttr(c->def(), "beta2"), &beta2_)) return;
    if (!GetAttr(c, GetFloatAttr(c->def(), "epsilon"), &epsilon_)) return;
    // The kernel's ticket counter (see LaunchApplyAdam): zeroed once, and
    // left at zero by every launch.
    gpu::GpuDevice* gpu = Gpu(c);
    absl::Status current = gpu->MakeCurrent();
    if (!current.ok()) {
      c->SetStatus(current);
      return;
    }
    auto ticket = Tensor::Allocate(DType::kInt32, TensorShape{1}, gpu->allocator());
    if (!ticket.ok()) {
      c->SetStatus(ticket.status());
      return;
    }
    ticket_ = *std::move(ticket);
    cudaError_t err = cudaMemsetAsync(ticket_.raw_data(), 0, sizeof(int32_t), gpu->stream());
    if (err != cudaSuccess) c->SetStatus(gpu::CudaStatus(err, "cudaMemsetAsync (ApplyAdam ticket)"));
  }
  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, CheckLikeVar(ctx, {{1, "m"}, {2, "v"}, {4, "grad"}}));
    const Tensor& t = ctx->input(3);
    OP_REQUIRES(ctx, t.dtype() == DType::kFloat32 && t.NumElements() == 1,
                absl::InvalidArgumentError(absl::StrCat("t must be a float32 scalar, got ", DTypeName(t.dtype()),
                                                        t.shape().DebugString())));
    OP_REQUIRES_CUDA(ctx,
                     LaunchApplyAdam(MutableInput(ctx, 0), MutableInput(ctx, 1), MutableInput(ctx, 2),
                                     MutableInput(ctx, 3), ctx->input(4).data<float>(), lr_, beta1_, beta2_, epsilon_,
                                     ctx->input(0).NumElements(), static_cast<unsigned int*>(ticket_.raw_data()),
                                     Stream(ctx)),
                     "ApplyAdam kernel");
    ctx->set_output(0, ctx->input(0));
  }

 private:
  float lr_ = 0, beta1_ = 0.9f, beta2_ = 0.999f, epsilon_ = 1e-7f;
  Tensor ticket_;
};

WEFT_REGISTER_KERNEL("ApplyGradientDescent", "GPU", ApplyGradientDescentOp);
WEFT_REGISTER_KERNEL("ApplyMomentum", "GPU", ApplyMomentumOp);
WEFT_REGISTER_KERNEL("ApplyAdam", "GPU", ApplyAdamOp);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
