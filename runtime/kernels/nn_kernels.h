// The nn ops' kernels (graph/ops/nn_ops.cc: activations and their
// gradients, Softmax(+Grad), the sparse softmax cross-entropy loss,
// Dropout), written once for every device as in math_kernels.h: each class
// template reads its op's inputs and attributes, runs the checks
// (nn_checks.h), allocates the outputs and hands the operands to `Impl`,
// the device's computation (cpu/nn_kernels.cc, cuda/gpu_nn_kernels.cc).
//
// Impl is a compile-time policy with a static Run, except where a device
// keeps state per kernel (SparseXentKernel's Impl is a member): a step pays
// the one virtual call of OpKernel::Compute and nothing per element.
//
// Thread-safety: kernels are immutable after construction, except what an
// Impl member guards itself; Compute may run concurrently.
#ifndef WEFT_RUNTIME_KERNELS_NN_KERNELS_H_
#define WEFT_RUNTIME_KERNELS_NN_KERNELS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/dtype.h"
#include "common/tensor.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/kernels/nn_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace kernels {

// Relu, Sigmoid, Tanh: y = F(x) elementwise. Impl::Run(ctx, x, out).
template <typename Impl>
class ActivationKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr) return;
    Impl::Run(ctx, x, out);
  }
};

// What an activation gradient's two inputs are called in its errors.
struct ReluGradRoles {  // (g, x)
  static constexpr const char* kRoleA = "gradient";
  static constexpr const char* kRoleB = "x";
};
struct SigmoidGradRoles {  // (y, g)
  static constexpr const char* kRoleA = "y";
  static constexpr const char* kRoleB = "gradient";
};
using TanhGradRoles = SigmoidGradRoles;

// ReluGrad, SigmoidGrad, TanhGrad: out = F(a, b) for two same-shaped
// inputs. Impl::Run(ctx, a, b, out).
template <typename Roles, typename Impl>
class ActivationGradKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    OP_REQUIRES_OK(ctx, ExpectSameShape(a, b, Roles::kRoleA, Roles::kRoleB));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, a.shape());
    if (out == nullptr) return;
    Impl::Run(ctx, a, b, out);
  }
};

// t as [rows, cols] rows of its last axis (a scalar is one row of one).
inline void RowsAndCols(const Tensor& t, int64_t* rows, int64_t* cols) {
  const int r = t.shape().rank();
  *cols = r == 0 ? 1 : t.shape().dim(r - 1);
  *rows = *cols == 0 ? 0 : t.NumElements() / *cols;
}

// Softmax over the last axis. Impl::Run(ctx, x, rows, cols, out).
template <typename Impl>
class SoftmaxKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckLogits(x));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr) return;
    int64_t rows, cols;
    RowsAndCols(x, &rows, &cols);
    Impl::Run(ctx, x, rows, cols, out);
  }
};

// SoftmaxGrad from the softmax output y and its gradient g.
// Impl::Run(ctx, y, g, rows, cols, out).
template <typename Impl>
class SoftmaxGradKernel : public OpKernel {
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
    Impl::Run(ctx, y, g, rows, cols, out);
  }
};

// SparseSoftmaxCrossEntropyWithLogits: logits [n, c] and labels [n] to the
// loss [n] and its backprop [n, c]. The labels' range is the device's to
// check, since reading them is: Impl (one per kernel, constructed with the
// kernel's OpKernelConstruction) has
//   absl::Status CheckLabels(ctx, labels, c), called before allocating, and
//   void Run(ctx, logits, labels, n, c, loss, backprop).
template <typename Impl>
class SparseXentKernel : public OpKernel {
 public:
  explicit SparseXentKernel(OpKernelConstruction* c) : OpKernel(c), impl_(c) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& logits = ctx->input(0);
    const Tensor& labels = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckSparseXentOperands(logits, labels));
    const int64_t n = logits.shape().dim(0), c = logits.shape().dim(1);
    OP_REQUIRES_OK(ctx, impl_.CheckLabels(ctx, labels, c));
    Tensor* loss = ctx->allocate_output(0, DType::kFloat32, TensorShape{n});
    Tensor* backprop = ctx->allocate_output(1, DType::kFloat32, TensorShape{n, c});
    if (loss == nullptr || backprop == nullptr) return;
    impl_.Run(ctx, logits, labels, n, c, loss, backprop);
  }
  absl::Status CheckRecordedLaunches() override { return internal::CheckRecordedLaunchesOf(impl_, 0); }

 private:
  Impl impl_;
};

// Dropout with its attributes read once (DropoutParams, so every device
// draws the same mask). Impl::Run(ctx, params, x, y, mask).
template <typename Impl>
class DropoutKernel : public OpKernel {
 public:
  explicit DropoutKernel(OpKernelConstruction* c) : OpKernel(c) { GetAttr(c, DropoutParams::FromNode(c->def()), &p_); }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* y = ctx->allocate_output(0, DType::kFloat32, x.shape());
    Tensor* mask = ctx->allocate_output(1, DType::kFloat32, x.shape());
    if (y == nullptr || mask == nullptr) return;
    Impl::Run(ctx, p_, x, y, mask);
  }
  bool UsesDeviceStepId() const override { return internal::UsesDeviceStepIdOf<Impl>(0); }

 private:
  DropoutParams p_;
};

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_NN_KERNELS_H_
