// GPU kernels for activations, Softmax, the sparse softmax cross-entropy and
// Dropout (graph/ops/nn_ops.cc), with the CPU kernels' checks and messages
// (runtime/kernels/cpu/nn_kernels.cc).
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
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/cpu/nn_checks.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {
namespace {

using cpu::ExpectSameShape;
using cpu::GetAttr;

template <UnaryFn kFn>
class UnaryOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr) return;
    OP_REQUIRES_CUDA(ctx, LaunchUnary(kFn, x.data<float>(), out->data<float>(), x.NumElements(), Stream(ctx)),
                     "activation kernel");
  }
};

// out = F(a, b) for two same-shaped inputs; roles name them in errors.
template <BinaryFn kFn>
class BinaryGradOp : public OpKernel {
 public:
  BinaryGradOp(OpKernelConstruction* c, const char* role_a, const char* role_b)
      : OpKernel(c), role_a_(role_a), role_b_(role_b) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    OP_REQUIRES_OK(ctx, ExpectSameShape(a, b, role_a_, role_b_));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, a.shape());
    if (out == nullptr) return;
    OP_REQUIRES_CUDA(ctx,
                     LaunchBinary(kFn, a.data<float>(), b.data<float>(), false, out->data<float>(), a.NumElements(),
                                  Stream(ctx)),
                     "activation gradient kernel");
  }

 private:
  const char* role_a_;
  const char* role_b_;
};

class ReluGradOp : public BinaryGradOp<BinaryFn::kReluGrad> {
 public:
  explicit ReluGradOp(OpKernelConstruction* c) : BinaryGradOp(c, "gradient", "x") {}
};
class SigmoidGradOp : public BinaryGradOp<BinaryFn::kSigmoidGrad> {
 public:
  explicit SigmoidGradOp(OpKernelConstruction* c) : BinaryGradOp(c, "y", "gradient") {}
};
class TanhGradOp : public BinaryGradOp<BinaryFn::kTanhGrad> {
 public:
  explicit TanhGradOp(OpKernelConstruction* c) : BinaryGradOp(c, "y", "gradient") {}
};

void RowsAndCols(const Tensor& t, int64_t* rows, int64_t* cols) {
  const int r = t.shape().rank();
  *cols = r == 0 ? 1 : t.shape().dim(r - 1);
  *rows = *cols == 0 ? 0 : t.NumElements() / *cols;
}

class SoftmaxOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    OP_REQUIRES_OK(ctx, cpu::CheckLogits(x));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr) return;
    int64_t rows, cols;
    RowsAndCols(x, &rows, &cols);
    OP_REQUIRES_CUDA(ctx, LaunchSoftmax(x.data<float>(), out->data<float>(), rows, cols, Stream(ctx)),
                     "Softmax kernel");
  }
};

class SoftmaxGradOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& y = ctx->input(0);
    const Tensor& g = ctx->input(1);
    OP_REQUIRES_OK(ctx, ExpectSameShape(y, g, "y", "gradient"));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, y.shape());
    if (out == nullptr) return;
    int64_t rows, cols;
    RowsAndCols(y, &rows, &cols);
    OP_REQUIRES_CUDA(ctx,
                     LaunchSoftmaxGrad(y.data<float>(), g.data<float>(), out->data<float>(), rows, cols, Stream(ctx)),
                     "SoftmaxGrad kernel");
  }
};

class SparseXentOp : public OpKernel {
 public:
  explicit SparseXentOp(OpKernelConstruction* c) : OpKernel(c) {
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
  ~SparseXentOp() override {
    // cudaFreeHost waits for the device, so no launch still writes the flag.
    if (error_host_ != nullptr) cudaFreeHost(const_cast<int32_t*>(error_host_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& logits = ctx->input(0);
    const Tensor& labels = ctx->input(1);
    OP_REQUIRES_OK(ctx, cpu::CheckSparseXentOperands(logits, labels));
    const int64_t n = logits.shape().dim(0), c = logits.shape().dim(1);
    OP_REQUIRES_OK(ctx, EarlierBadLabel());
    Tensor* loss = ctx->allocate_output(0, DType::kFloat32, TensorShape{n});
    Tensor* backprop = ctx->allocate_output(1, DType::kFloat32, TensorShape{n, c});
    if (loss == nullptr || backprop == nullptr) return;
    OP_REQUIRES_CUDA(ctx,
                     LaunchSparseXent(logits.data<float>(), labels.data<int32_t>(), loss->data<float>(),
                                      backprop->data<float>(), n, c, error_dev_, Stream(ctx)),
                     "SparseSoftmaxCrossEntropyWithLogits kernel");
  }

 private:
  // The bad label an earlier launch recorded, once; reading host-mapped
  // memory does not wait for the device.
  absl::Status EarlierBadLabel() {
    if (error_host_ == nullptr || error_host_[0] != 2) return absl::OkStatus();
    absl::MutexLock lock(&mu_);
    if (error_host_[0] != 2) return absl::OkStatus();
    const int32_t row = error_host_[1], label = error_host_[2], cols = error_host_[3];
    error_host_[0] = 0;
    return absl::InvalidArgumentError(absl::StrCat("label ", label, " in row ", row,
                                                   " is outside the valid range [0, ", cols, ")",
                                                   " (found on the GPU in an earlier step, whose loss is NaN)"));
  }

  absl::Mutex mu_;
  volatile int32_t* error_host_ = nullptr;
  int32_t* error_dev_ = nullptr;
};

class DropoutOp : public OpKernel {
 public:
  // The CPU kernel's parameters (runtime/kernels/cpu/nn_checks.h), so the
  // masks are the CPU's; the GPU test checks they are.
  explicit DropoutOp(OpKernelConstruction* c) : OpKernel(c) {
    GetAttr(c, cpu::DropoutParams::FromNode(c->def()), &p_);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* y = ctx->allocate_output(0, DType::kFloat32, x.shape());
    Tensor* mask = ctx->allocate_output(1, DType::kFloat32, x.shape());
    if (y == nullptr || mask == nullptr) return;
    OP_REQUIRES_CUDA(ctx,
                     LaunchDropout(x.data<float>(), y->data<float>(), mask->data<float>(), x.NumElements(),
                                   p_.StepKey(ctx->step_id()), p_.threshold, p_.scale, Stream(ctx)),
                     "Dropout kernel");
  }

 private:
  cpu::DropoutParams p_;
};

WEFT_REGISTER_KERNEL("Relu", "GPU", UnaryOp<UnaryFn::kRelu>);
WEFT_REGISTER_KERNEL("Sigmoid", "GPU", UnaryOp<UnaryFn::kSigmoid>);
WEFT_REGISTER_KERNEL("Tanh", "GPU", UnaryOp<UnaryFn::kTanh>);
WEFT_REGISTER_KERNEL("ReluGrad", "GPU", ReluGradOp);
WEFT_REGISTER_KERNEL("SigmoidGrad", "GPU", SigmoidGradOp);
WEFT_REGISTER_KERNEL("TanhGrad", "GPU", TanhGradOp);
WEFT_REGISTER_KERNEL("Softmax", "GPU", SoftmaxOp);
WEFT_REGISTER_KERNEL("SoftmaxGrad", "GPU", SoftmaxGradOp);
WEFT_REGISTER_KERNEL("SparseSoftmaxCrossEntropyWithLogits", "GPU", SparseXentOp);
WEFT_REGISTER_KERNEL("Dropout", "GPU", DropoutOp);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
