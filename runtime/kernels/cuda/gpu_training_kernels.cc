// GPU kernels for the optimizer updates and ApplyMovingAverage
// (graph/ops/training_ops.cc): one launch per variable, writing the
// variable's device buffer (and slots) in place and forwarding `var` as
// output 0, on the skeleton the CPU kernels share
// (runtime/kernels/training_kernels.h): the same attributes and checks.
//
// Every launch goes to the device's one compute stream, so updates of one
// variable from concurrent steps run one after another, as the CPU's update
// lock orders them.
#include "absl/strings/str_cat.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/training_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {
namespace {

struct GradientDescent {
  explicit GradientDescent(OpKernelConstruction*) {}
  void Run(OpKernelContext* ctx, const kernels::GradientDescentParams& p) const {
    OP_REQUIRES_CUDA(ctx,
                     LaunchApplyGradientDescent(MutableInput(ctx, 0), ctx->input(1).data<float>(), p.learning_rate,
                                                ctx->input(0).NumElements(), Stream(ctx)),
                     "ApplyGradientDescent kernel");
  }
};

struct Momentum {
  explicit Momentum(OpKernelConstruction*) {}
  void Run(OpKernelContext* ctx, const kernels::MomentumParams& p) const {
    OP_REQUIRES_CUDA(ctx,
                     LaunchApplyMomentum(MutableInput(ctx, 0), MutableInput(ctx, 1), ctx->input(2).data<float>(),
                                         p.learning_rate, p.momentum, p.use_nesterov, ctx->input(0).NumElements(),
                                         Stream(ctx)),
                     "ApplyMomentum kernel");
  }
};

class Adam {
 public:
  explicit Adam(OpKernelConstruction* c) {
    if (!c->status().ok()) return;  // an attribute was bad: the kernel is not made
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

  void Run(OpKernelContext* ctx, const kernels::AdamParams& p) {
    OP_REQUIRES_CUDA(ctx,
                     LaunchApplyAdam(MutableInput(ctx, 0), MutableInput(ctx, 1), MutableInput(ctx, 2),
                                     MutableInput(ctx, 3), ctx->input(4).data<float>(), p.learning_rate, p.beta1,
                                     p.beta2, p.epsilon, ctx->input(0).NumElements(),
                                     static_cast<unsigned int*>(ticket_.raw_data()), Stream(ctx)),
                     "ApplyAdam kernel");
  }

 private:
  Tensor ticket_;
};

struct MovingAverage {
  explicit MovingAverage(OpKernelConstruction*) {}
  void Run(OpKernelContext* ctx, const kernels::MovingAverageParams& p) const {
    OP_REQUIRES_CUDA(ctx,
                     LaunchApplyMovingAverage(MutableInput(ctx, 0), ctx->input(1).data<float>(), p.momentum,
                                              ctx->input(0).NumElements(), Stream(ctx)),
                     "ApplyMovingAverage kernel");
  }
};

// Aliases: the macro cannot take a template argument list with a comma.
using ApplyGradientDescentKernel = kernels::ApplyKernel<kernels::GradientDescentOp, GradientDescent>;
using ApplyMomentumKernel = kernels::ApplyKernel<kernels::MomentumOp, Momentum>;
using ApplyAdamKernel = kernels::ApplyKernel<kernels::AdamOp, Adam>;
using ApplyMovingAverageKernel = kernels::ApplyKernel<kernels::MovingAverageOp, MovingAverage>;

WEFT_REGISTER_KERNEL("ApplyGradientDescent", "GPU", ApplyGradientDescentKernel);
WEFT_REGISTER_KERNEL("ApplyMomentum", "GPU", ApplyMomentumKernel);
WEFT_REGISTER_KERNEL("ApplyAdam", "GPU", ApplyAdamKernel);
WEFT_REGISTER_KERNEL("ApplyMovingAverage", "GPU", ApplyMovingAverageKernel);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
