// GPU kernels for the math ops (graph/ops/math_ops.cc): BiasAdd(+Grad),
// Add/Sub/Mul/Neg, AddN, Sum/Mean (+Grad), ScaleRows, RowDot, ArgMax, Equal.
// Shape checks and error messages are the CPU kernels'
// (runtime/kernels/cpu/math_kernels.cc); the work is one launch per op
// (AddN: one per 16 inputs; BiasAddGrad: two when it has many rows).
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/cpu/math_checks.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {
namespace {

using cpu::CheckAddNInputs;
using cpu::CheckArgMax;
using cpu::CheckBiasAdd;
using cpu::CheckBiasAddGrad;
using cpu::CheckBinaryOperands;
using cpu::CheckEqualOperands;
using cpu::CheckRowDot;
using cpu::CheckScalarGradient;
using cpu::CheckScaleRows;

const float* F(const Tensor& t) { return t.data<float>(); }
float* F(Tensor* t) { return t->data<float>(); }

class BiasAddOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& bias = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckBiasAdd(x, bias));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr) return;
    const int64_t c = bias.NumElements();
    if (c == 0) return;
    OP_REQUIRES_CUDA(ctx, LaunchBiasAdd(F(x), F(bias), F(out), x.NumElements() / c, c, Stream(ctx)),
                     "BiasAdd kernel");
  }
};

class BiasAddGradOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& g = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckBiasAddGrad(g));
    const int64_t c = g.shape().dim(g.shape().rank() - 1);
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, TensorShape{c});
    if (out == nullptr || c == 0) return;
    const int64_t rows = g.NumElements() / c;
    const int64_t scratch_floats = BiasAddGradScratchFloats(rows, c);
    Tensor scratch;
    if (scratch_floats > 0) {
      absl::StatusOr<Tensor> allocated = Scratch(ctx, scratch_floats);
      OP_REQUIRES_OK(ctx, allocated.status());
      scratch = *std::move(allocated);
    }
    OP_REQUIRES_CUDA(ctx,
                     LaunchBiasAddGrad(F(g), rows, c, scratch_floats > 0 ? F(&scratch) : nullptr, F(out),
                                       Stream(ctx)),
                     "BiasAddGrad kernel");
  }
};

// x (op) y for same shapes, or x (op) scalar y.
template <BinaryFn kFn>
class BinaryOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& y = ctx->input(1);
    const bool scalar_y = y.shape().rank() == 0;
    OP_REQUIRES_OK(ctx, CheckBinaryOperands(x, y));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr) return;
    OP_REQUIRES_CUDA(ctx, LaunchBinary(kFn, F(x), F(y), scalar_y, F(out), x.NumElements(), Stream(ctx)),
                     "binary elementwise kernel");
  }
};

class NegOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr) return;
    OP_REQUIRES_CUDA(ctx, LaunchUnary(UnaryFn::kNeg, F(x), F(out), x.NumElements(), Stream(ctx)), "Neg kernel");
  }
};

class AddNOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x0 = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckAddNInputs(ctx));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x0.shape());
    if (out == nullptr) return;
    // Up to 16 inputs per launch; further launches add the next ones in
    // order, keeping the CPU's left-to-right sum.
    const float* in[kAddNMaxInputs];
    for (int first = 0; first < ctx->num_inputs(); first += kAddNMaxInputs) {
      const int count = std::min(kAddNMaxInputs, ctx->num_inputs() - first);
      for (int k = 0; k < count; ++k) in[k] = F(ctx->input(first + k));
      OP_REQUIRES_CUDA(ctx, LaunchAddN(in, count, first > 0, F(out), x0.NumElements(), Stream(ctx)),
                       "AddN kernel");
    }
  }
};

template <bool kMean>
class ReduceAllOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, TensorShape{});
    if (out == nullptr) return;
    OP_REQUIRES_CUDA(ctx, LaunchReduceAll(F(x), x.NumElements(), kMean, F(out), Stream(ctx)),
                     kMean ? "Mean kernel" : "Sum kernel");
  }
};

template <bool kMean>
class ReduceAllGradOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& g = ctx->input(0);
    const Tensor& x = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckScalarGradient(g));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr) return;
    OP_REQUIRES_CUDA(ctx, LaunchFillFromScalar(F(g), kMean, F(out), x.NumElements(), Stream(ctx)),
                     kMean ? "MeanGrad kernel" : "SumGrad kernel");
  }
};

class ScaleRowsOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& m = ctx->input(0);
    const Tensor& s = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckScaleRows(m, s));
    const int64_t rows = m.shape().dim(0), cols = m.shape().dim(1);
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, m.shape());
    if (out == nullptr) return;
    OP_REQUIRES_CUDA(ctx, LaunchScaleRows(F(m), F(s), F(out), rows, cols, Stream(ctx)), "ScaleRows kernel");
  }
};

class RowDotOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& y = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckRowDot(x, y));
    const int64_t rows = x.shape().dim(0), cols = x.shape().dim(1);
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, TensorShape{rows});
    if (out == nullptr) return;
    OP_REQUIRES_CUDA(ctx, LaunchRowDot(F(x), F(y), F(out), rows, cols, Stream(ctx)), "RowDot kernel");
  }
};

class ArgMaxOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckArgMax(x));
    const int r = x.shape().rank();
    TensorShape out_shape = x.shape();
    out_shape.RemoveDim(r - 1);
    Tensor* out = ctx->allocate_output(0, DType::kInt32, out_shape);
    if (out == nullptr) return;
    const int64_t c = x.shape().dim(r - 1);
    OP_REQUIRES_CUDA(ctx, LaunchArgMax(F(x), out->data<int32_t>(), x.NumElements() / c, c, Stream(ctx)),
                     "ArgMax kernel");
  }
};

class EqualOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& y = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckEqualOperands(x, y));
    const DType t = x.dtype();
    OP_REQUIRES(ctx, t == DType::kFloat32 || t == DType::kInt32 || t == DType::kInt64 || t == DType::kBool,
                absl::InvalidArgumentError(absl::StrCat("Equal does not support ", DTypeName(t))));
    Tensor* out = ctx->allocate_output(0, DType::kBool, x.shape());
    if (out == nullptr) return;
    OP_REQUIRES_CUDA(ctx,
                     LaunchEqual(static_cast<ElemType>(t), x.raw_data(), y.raw_data(), out->data<bool>(),
                                 x.NumElements(), Stream(ctx)),
                     "Equal kernel");
  }
};

WEFT_REGISTER_KERNEL("BiasAdd", "GPU", BiasAddOp);
WEFT_REGISTER_KERNEL("BiasAddGrad", "GPU", BiasAddGradOp);
WEFT_REGISTER_KERNEL("Add", "GPU", BinaryOp<BinaryFn::kAdd>);
WEFT_REGISTER_KERNEL("Sub", "GPU", BinaryOp<BinaryFn::kSub>);
WEFT_REGISTER_KERNEL("Mul", "GPU", BinaryOp<BinaryFn::kMul>);
WEFT_REGISTER_KERNEL("Neg", "GPU", NegOp);
WEFT_REGISTER_KERNEL("AddN", "GPU", AddNOp);
WEFT_REGISTER_KERNEL("Sum", "GPU", ReduceAllOp<false>);
WEFT_REGISTER_KERNEL("Mean", "GPU", ReduceAllOp<true>);
WEFT_REGISTER_KERNEL("SumGrad", "GPU", ReduceAllGradOp<false>);
WEFT_REGISTER_KERNEL("MeanGrad", "GPU", ReduceAllGradOp<true>);
WEFT_REGISTER_KERNEL("ScaleRows", "GPU", ScaleRowsOp);
WEFT_REGISTER_KERNEL("RowDot", "GPU", RowDotOp);
WEFT_REGISTER_KERNEL("ArgMax", "GPU", ArgMaxOp);
WEFT_REGISTER_KERNEL("Equal", "GPU", EqualOp);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
