// GPU kernels for activations, Softmax, the sparse softmax cross-entropy and
// Dropout (graph/ops/nn_ops.cc), on the skeletons the CPU kernels share
// (runtime/kernels/nn_kernels.h): the same checks, messages and outputs.
//
// Labels live on the device, so SparseSoftmaxCrossEntropyWithLogits cannot
// check them before it launches without waiting for the device. Instead the
// kernel makes a bad row's loss and backprop NaN (so a fetched loss shows it
// at once) and records the first bad (row, label) in host-mapped memory; the
// next Compute of the same node reports INVALID_ARGUMENT with the CPU's
// message. One step may therefore finish before the error is reported.
//
// Dropout draws from the CPU's counter-based generator with the same key
// (seed, node name, step id), so its masks are bit-identical to the CPU's.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/kernels/nn_checks.h"
#include "runtime/kernels/nn_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {
namespace {

template <UnaryFn kFn>
struct Activation {
  static void Run(OpKernelContext* ctx, const Tensor& x, Tensor* out) {
    OP_REQUIRES_CUDA(ctx, LaunchUnary(kFn, x.data<float>(), out->data<float>(), x.NumElements(), Stream(ctx)),
                     "activation kernel");
  }
};

// out = F(a, b) for two same-shaped inputs.
template <BinaryFn kFn>
struct ActivationGrad {
  static void Run(OpKernelContext* ctx, const Tensor& a, const Tensor& b, Tensor* out) {
    OP_REQUIRES_CUDA(ctx,
                     LaunchBinary(kFn, a.data<float>(), b.data<float>(), false, out->data<float>(), a.NumElements(),
                                  Stream(ctx)),
                     "activation gradient kernel");
  }
};

struct Softmax {
  static void Run(OpKernelContext* ctx, const Tensor& x, int64_t rows, int64_t cols, Tensor* out) {
    OP_REQUIRES_CUDA(ctx, LaunchSoftmax(x.data<float>(), out->data<float>(), rows, cols, Stream(ctx)),
                     "Softmax kernel");
  }
};

struct SoftmaxGrad {
  static void Run(OpKernelContext* ctx, const Tensor& y, const Tensor& g, int64_t rows, int64_t cols, Tensor* out) {
    OP_REQUIRES_CUDA(ctx,
                     LaunchSoftmaxGrad(y.data<float>(), g.data<float>(), out->data<float>(), rows, cols, Stream(ctx)),
                     "SoftmaxGrad kernel");
  }
};

// The labels are on the device: a launch records the first bad one in
// host-mapped memory, and the next step reports it (CheckLabels).
class SparseXent {
 public:
  explicit SparseXent(OpKernelConstruction* c) {
    // Host memory the device writes through: [flag, row, label, cols].
    absl::Status current = Gpu(c)->MakeCurrent();
    if (!current.ok()) {
      c->SetStatus(current);
      return;
    }
    void* p = nullptr;
    cudaError_t err = cudaHostAlloc(&p, 4 * sizeof(int32_t), cudaHostAllocMapped);
    if (err != cudaSuccess) {
      c->SetStatus(gpu::CudaStatus(err, "cudaHostAlloc (label error flag)"));
      return;
    }
    error_host_ = static_cast<volatile int32_t*>(p);
    for (int i = 0; i < 4; ++i) error_host_[i] = 0;
    err = cudaHostGetDevicePointer(reinterpret_cast<void**>(&error_dev_), p, 0);
    if (err != cudaSuccess) c->SetStatus(gpu::CudaStatus(err, "cudaHostGetDevicePointer (label error flag)"));
  }
  ~SparseXent() {
    // cudaFreeHost waits for the device, so no launch still writes the flag.
    if (error_host_ != nullptr) cudaFreeHost(const_cast<int32_t*>(error_host_));
  }
  SparseXent(const SparseXent&) = delete;
  SparseXent& operator=(const SparseXent&) = delete;

  absl::Status CheckLabels(OpKernelContext*, const Tensor&, int64_t) { return CheckRecordedLaunches(); }
  // The bad label an earlier launch recorded, once; reading host-mapped
  // memory does not wait for the device.
  absl::Status CheckRecordedLaunches() {
    if (error_host_ == nullptr || error_host_[0] != 2) return absl::OkStatus();
    absl::MutexLock lock(&mu_);
    if (error_host_[0] != 2) return absl::OkStatus();
    const int32_t row = error_host_[1], label = error_host_[2], cols = error_host_[3];
    error_host_[0] = 0;
    return absl::InvalidArgumentError(absl::StrCat("label ", label, " in row ", row,
                                                   " is outside the valid range [0, ", cols, ")",
                                                   " (found on the GPU in an earlier step, whose loss is NaN)"));
  }

  void Run(OpKernelContext* ctx, const Tensor& logits, const Tensor& labels, int64_t n, int64_t c, Tensor* loss,
           Tensor* backprop) {
    OP_REQUIRES_CUDA(ctx,
                     LaunchSparseXent(logits.data<float>(), labels.data<int32_t>(), loss->data<float>(),
                                      backprop->data<float>(), n, c, error_dev_, Stream(ctx)),
                     "SparseSoftmaxCrossEntropyWithLogits kernel");
  }

 private:
  absl::Mutex mu_;
  volatile int32_t* error_host_ = nullptr;
  int32_t* error_dev_ = nullptr;
};

// With the CPU kernel's parameters (kernels::DropoutParams), so the masks
// are the CPU's; the GPU test checks they are.
struct Dropout {
  // Where the executor keeps the step id on the device (a recorded step's
  // executor), the key is made there.
  static constexpr bool kUsesDeviceStepId = true;
  static void Run(OpKernelContext* ctx, const kernels::DropoutParams& p, const Tensor& x, Tensor* y, Tensor* mask) {
    if (const int64_t* step = ctx->device_step_id()) {
      OP_REQUIRES_CUDA(ctx,
                       LaunchDropoutAtStep(x.data<float>(), y->data<float>(), mask->data<float>(), x.NumElements(),
                                           step, static_cast<uint64_t>(p.seed), p.name_hash, p.threshold, p.scale,
                                           Stream(ctx)),
                       "Dropout kernel");
      return;
    }
    OP_REQUIRES_CUDA(ctx,
                     LaunchDropout(x.data<float>(), y->data<float>(), mask->data<float>(), x.NumElements(),
                                   p.StepKey(ctx->step_id()), p.threshold, p.scale, Stream(ctx)),
                     "Dropout kernel");
  }
};

// Aliases: the macro cannot take a template argument list with a comma.
using ReluGradKernel = kernels::ActivationGradKernel<kernels::ReluGradRoles, ActivationGrad<BinaryFn::kReluGrad>>;
using SigmoidGradKernel =
    kernels::ActivationGradKernel<kernels::SigmoidGradRoles, ActivationGrad<BinaryFn::kSigmoidGrad>>;
using TanhGradKernel = kernels::ActivationGradKernel<kernels::TanhGradRoles, ActivationGrad<BinaryFn::kTanhGrad>>;

WEFT_REGISTER_KERNEL("Relu", "GPU", kernels::ActivationKernel<Activation<UnaryFn::kRelu>>);
WEFT_REGISTER_KERNEL("Sigmoid", "GPU", kernels::ActivationKernel<Activation<UnaryFn::kSigmoid>>);
WEFT_REGISTER_KERNEL("Tanh", "GPU", kernels::ActivationKernel<Activation<UnaryFn::kTanh>>);
WEFT_REGISTER_KERNEL("ReluGrad", "GPU", ReluGradKernel);
WEFT_REGISTER_KERNEL("SigmoidGrad", "GPU", SigmoidGradKernel);
WEFT_REGISTER_KERNEL("TanhGrad", "GPU", TanhGradKernel);
WEFT_REGISTER_KERNEL("Softmax", "GPU", kernels::SoftmaxKernel<Softmax>);
WEFT_REGISTER_KERNEL("SoftmaxGrad", "GPU", kernels::SoftmaxGradKernel<SoftmaxGrad>);
WEFT_REGISTER_KERNEL("SparseSoftmaxCrossEntropyWithLogits", "GPU", kernels::SparseXentKernel<SparseXent>);
WEFT_REGISTER_KERNEL("Dropout", "GPU", kernels::DropoutKernel<Dropout>);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
