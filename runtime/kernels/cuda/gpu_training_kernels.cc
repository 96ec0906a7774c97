// GPU kernels for the optimizer updates, ApplyMovingAverage and loss scaling
// (graph/ops/training_ops.cc): one launch per variable, writing the
// variable's device buffer (and slots) in place and forwarding `var` as
// output 0, on the skeleton the CPU kernels share
// (runtime/kernels/training_kernels.h): the same attributes and checks.
//
// Every launch goes to the device's one compute stream, so updates of one
// variable from concurrent steps run one after another, as the CPU's update
// lock orders them.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/training_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {
namespace {

// A device scalar of `dtype` that a kernel object keeps across steps, zeroed
// once on the device's stream; an empty tensor, with c's status set, when
// that fails. `what` names it in the error.
Tensor ZeroedDeviceScalar(OpKernelConstruction* c, DType dtype, const char* what) {
  gpu::GpuDevice* gpu = Gpu(c);
  absl::Status current = gpu->MakeCurrent();
  if (!current.ok()) {
    c->SetStatus(current);
    return Tensor();
  }
  auto t = Tensor::Allocate(dtype, TensorShape{1}, gpu->allocator());
  if (!t.ok()) {
    c->SetStatus(t.status());
    return Tensor();
  }
  cudaError_t err = cudaMemsetAsync(t->raw_data(), 0, DTypeSize(dtype), gpu->stream());
  if (err != cudaSuccess) {
    c->SetStatus(gpu::CudaStatus(err, absl::StrCat("cudaMemsetAsync (", what, ")").c_str()));
    return Tensor();
  }
  return *std::move(t);
}

// The device counter behind an update's count (see UpdateCount in
// gpu_launch.h): zeroed once, and left at zero by every launch.
class Ticket {
 public:
  explicit Ticket(OpKernelConstruction* c) {
    if (!c->status().ok()) return;  // an attribute was bad: the kernel is not made
    ticket_ = ZeroedDeviceScalar(c, DType::kInt32, "update ticket");
  }

  // The count at input i, when the update has one there (i is not its last
  // input, the gradient).
  UpdateCount At(OpKernelContext* ctx, int i) {
    UpdateCount count;
    if (ctx->num_inputs() > i + 1) {
      count.t = MutableInput(ctx, i);
      count.ticket = static_cast<unsigned int*>(ticket_.raw_data());
    }
    return count;
  }

 private:
  Tensor ticket_;
};

const float* Grad(OpKernelContext* ctx) { return ctx->input(ctx->num_inputs() - 1).data<float>(); }

// `count` with the gradient as its guard when the update skips steps that
// overflowed (skip_nonfinite) and has an element to look at.
UpdateCount Guarded(UpdateCount count, OpKernelContext* ctx, const kernels::RateParams& p) {
  if (p.skip_nonfinite && ctx->input(ctx->num_inputs() - 1).NumElements() > 0) count.guard = Grad(ctx);
  return count;
}

class GradientDescent {
 public:
  explicit GradientDescent(OpKernelConstruction* c) : ticket_(c) {}
  void Run(OpKernelContext* ctx, const kernels::GradientDescentParams& p) {
    OP_REQUIRES_CUDA(ctx,
                     LaunchApplyGradientDescent(MutableInput(ctx, 0), Grad(ctx), p.schedule, p.weight_decay,
                                                Guarded(ticket_.At(ctx, 1), ctx, p), ctx->input(0).NumElements(),
                                                Stream(ctx)),
                     "ApplyGradientDescent kernel");
  }

 private:
  Ticket ticket_;
};

class Momentum {
 public:
  explicit Momentum(OpKernelConstruction* c) : ticket_(c) {}
  void Run(OpKernelContext* ctx, const kernels::MomentumParams& p) {
    OP_REQUIRES_CUDA(ctx,
                     LaunchApplyMomentum(MutableInput(ctx, 0), MutableInput(ctx, 1), Grad(ctx), p.schedule,
                                         p.weight_decay, p.momentum, p.use_nesterov,
                                         Guarded(ticket_.At(ctx, 2), ctx, p), ctx->input(0).NumElements(), Stream(ctx)),
                     "ApplyMomentum kernel");
  }

 private:
  Ticket ticket_;
};

class Adam {
 public:
  explicit Adam(OpKernelConstruction* c) : ticket_(c) {}
  void Run(OpKernelContext* ctx, const kernels::AdamParams& p) {
    OP_REQUIRES_CUDA(ctx,
                     LaunchApplyAdam(MutableInput(ctx, 0), MutableInput(ctx, 1), MutableInput(ctx, 2), Grad(ctx),
                                     p.schedule, p.weight_decay, p.beta1, p.beta2, p.epsilon,
                                     Guarded(ticket_.At(ctx, 3), ctx, p), ctx->input(0).NumElements(), Stream(ctx)),
                     "ApplyAdam kernel");
  }

 private:
  Ticket ticket_;
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

// The norm's device accumulator (a double, zeroed once and left at zero by
// every step) belongs to the kernel object. Steps share the device's one
// stream; the lock keeps one step's launches together on it, so concurrent
// steps use the accumulator one after another.
class GlobalNormScale {
 public:
  // 8 bytes of int64 hold the double.
  explicit GlobalNormScale(OpKernelConstruction* c)
      : acc_(ZeroedDeviceScalar(c, DType::kInt64, "GlobalNormScale accumulator")) {}

  void Run(OpKernelContext* ctx, float clip_norm, Tensor* scale, Tensor* norm) {
    absl::MutexLock lock(&mu_);
    double* acc = static_cast<double*>(acc_.raw_data());
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      OP_REQUIRES_CUDA(ctx,
                       LaunchSumSquares(ctx->input(i).data<float>(), ctx->input(i).NumElements(), acc, Stream(ctx)),
                       "GlobalNormScale sum of squares");
    }
    OP_REQUIRES_CUDA(ctx, LaunchNormScale(acc, clip_norm, scale->data<float>(), norm->data<float>(), Stream(ctx)),
                     "GlobalNormScale scale");
  }

 private:
  absl::Mutex mu_;
  Tensor acc_;
};

// The overflow flag (a device int, zeroed once and left at zero by every
// step) belongs to the kernel object; the lock keeps one step's launches
// together on the device's stream, as GlobalNormScale's does.
class UnscaleGradients {
 public:
  explicit UnscaleGradients(OpKernelConstruction* c)
      : flag_(ZeroedDeviceScalar(c, DType::kInt32, "UnscaleGradients flag")) {}

  // Two launches per kUnscaleTable gradients: the division (every
  // gradient's blocks in one grid) and the marks.
  void Run(OpKernelContext* ctx, const std::vector<Tensor*>& unscaled, Tensor* overflow) {
    absl::MutexLock lock(&mu_);
    int* flag = static_cast<int*>(flag_.raw_data());
    const float* scale = ctx->input(0).data<float>();
    const int total = static_cast<int>(unscaled.size());
    for (int first = 0; first < total; first += kUnscaleTable) {
      UnscaleTable table;
      table.count = std::min(kUnscaleTable, total - first);
      for (int t = 0; t < table.count; ++t) {
        table.g[t] = ctx->input(first + t + 1).data<float>();
        table.out[t] = unscaled[first + t]->data<float>();
        table.n[t] = unscaled[first + t]->NumElements();
      }
      OP_REQUIRES_CUDA(ctx, LaunchUnscale(table, scale, flag, Stream(ctx)), "UnscaleGradients kernel");
    }
    // The marks wait for every division: a later table's overflow marks the
    // earlier tables' outputs too.
    for (int first = 0; first < total; first += kUnscaleTable) {
      UnscaleTable table;
      table.count = std::min(kUnscaleTable, total - first);
      for (int t = 0; t < table.count; ++t) {
        table.out[t] = unscaled[first + t]->data<float>();
        table.n[t] = unscaled[first + t]->NumElements();
      }
      const bool last = first + kUnscaleTable >= total;
      OP_REQUIRES_CUDA(ctx, LaunchMarkOverflow(table, flag, last, overflow->data<float>(), Stream(ctx)),
                       "UnscaleGradients mark");
    }
  }

 private:
  absl::Mutex mu_;
  Tensor flag_;
};

struct ApplyLossScale {
  explicit ApplyLossScale(OpKernelConstruction*) {}
  void Run(OpKernelContext* ctx, float interval) const {
    OP_REQUIRES_CUDA(ctx,
                     LaunchApplyLossScale(MutableInput(ctx, 0), MutableInput(ctx, 1), ctx->input(2).data<float>(),
                                          interval, Stream(ctx)),
                     "ApplyLossScale kernel");
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
WEFT_REGISTER_KERNEL("GlobalNormScale", "GPU", kernels::GlobalNormScaleKernel<GlobalNormScale>);
WEFT_REGISTER_KERNEL("UnscaleGradients", "GPU", kernels::UnscaleGradientsKernel<UnscaleGradients>);
WEFT_REGISTER_KERNEL("ApplyLossScale", "GPU", kernels::ApplyLossScaleKernel<ApplyLossScale>);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
