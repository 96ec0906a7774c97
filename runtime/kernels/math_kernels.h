// The math ops' kernels (graph/ops/math_ops.cc, and MatMul), written once for every
// device: each class template below reads its op's inputs, runs the op's
// checks (math_checks.h), allocates the output, and hands the operands to
// `Impl::Run`, the device's computation (cpu/math_kernels.cc,
// cuda/gpu_math_kernels.cc). A device registers its kernels as, e.g.,
// WEFT_REGISTER_KERNEL("BiasAdd", "CPU", kernels::BiasAddKernel<CpuBiasAdd>),
// so both devices give a bad input the same error and the same output shape.
//
// Impl is a compile-time policy with a static Run: a step pays the one
// virtual call of OpKernel::Compute, as before, and nothing per element.
// Run is called only once the output is allocated; it reports a failure of
// its own through ctx (OP_REQUIRES_*).
//
// Thread-safety: kernels are stateless; Compute may run concurrently.
#ifndef WEFT_RUNTIME_KERNELS_MATH_KERNELS_H_
#define WEFT_RUNTIME_KERNELS_MATH_KERNELS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/tensor.h"
#include "graph/attr.h"
#include "graph/ops/compute_type.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/kernels/math_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace kernels {

// BiasAdd: out = x + bias along x's last dimension.
// Impl::Run(ctx, x, bias, out).
template <typename Impl>
class BiasAddKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& bias = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckBiasAdd(x, bias));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr) return;
    Impl::Run(ctx, x, bias, out);
  }
};

// BiasAddGrad: the sum of g over every dimension but the last, c of them.
// Impl::Run(ctx, g, c, out); c may be 0.
template <typename Impl>
class BiasAddGradKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& g = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckBiasAddGrad(g));
    const int64_t c = g.shape().dim(g.shape().rank() - 1);
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, TensorShape{c});
    if (out == nullptr) return;
    Impl::Run(ctx, g, c, out);
  }
};

// Add, Sub, Mul: x (op) y for same shapes, or x (op) scalar y.
// Impl::Run(ctx, x, y, scalar_y, out).
template <typename Impl>
class BinaryKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& y = ctx->input(1);
    const bool scalar_y = y.shape().rank() == 0;
    OP_REQUIRES_OK(ctx, CheckBinaryOperands(x, y));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr) return;
    Impl::Run(ctx, x, y, scalar_y, out);
  }
};

// Neg. Impl::Run(ctx, x, out).
template <typename Impl>
class NegKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr) return;
    Impl::Run(ctx, x, out);
  }
};

// AddN: the left-to-right sum of every input. Impl::Run(ctx, out).
template <typename Impl>
class AddNKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x0 = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckAddNInputs(ctx));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x0.shape());
    if (out == nullptr) return;
    Impl::Run(ctx, out);
  }
};

// Sum and Mean over every element, to a scalar. Impl::Run(ctx, x, out).
template <typename Impl>
class ReduceAllKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, TensorShape{});
    if (out == nullptr) return;
    Impl::Run(ctx, x, out);
  }
};

// SumGrad and MeanGrad: the scalar gradient g spread over x's shape.
// Impl::Run(ctx, g, x, out).
template <typename Impl>
class ReduceAllGradKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& g = ctx->input(0);
    const Tensor& x = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckScalarGradient(g));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr) return;
    Impl::Run(ctx, g, x, out);
  }
};

// ScaleRows: row i of m [rows, cols] times s[i].
// Impl::Run(ctx, m, s, rows, cols, out).
template <typename Impl>
class ScaleRowsKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& m = ctx->input(0);
    const Tensor& s = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckScaleRows(m, s));
    const int64_t rows = m.shape().dim(0), cols = m.shape().dim(1);
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, m.shape());
    if (out == nullptr) return;
    Impl::Run(ctx, m, s, rows, cols, out);
  }
};

// RowDot: the dot product of each row of x and y [rows, cols].
// Impl::Run(ctx, x, y, rows, cols, out).
template <typename Impl>
class RowDotKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& y = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckRowDot(x, y));
    const int64_t rows = x.shape().dim(0), cols = x.shape().dim(1);
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, TensorShape{rows});
    if (out == nullptr) return;
    Impl::Run(ctx, x, y, rows, cols, out);
  }
};

// ArgMax over the last dimension (c > 0 entries per row), int32 indices.
// Impl::Run(ctx, x, rows, c, out).
template <typename Impl>
class ArgMaxKernel : public OpKernel {
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
    Impl::Run(ctx, x, x.NumElements() / c, c, out);
  }
};

// Equal, elementwise, for float32, int32, int64 and bool operands.
// Impl::Run(ctx, x, y, out), with x's dtype one of those.
template <typename Impl>
class EqualKernel : public OpKernel {
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
    Impl::Run(ctx, x, y, out);
  }
};

// MatMul's operands: out [m, n] = op(a) [m, k] x op(b) [k, n], op being a
// transpose where ta / tb say so; a is [a0, a1] and b [b0, b1] as stored.
struct MatMulDims {
  bool ta = false, tb = false;
  // The operands are rounded to this before the product (mixed precision,
  // graph/ops/compute_type.h); the product accumulates in float32.
  ComputeType compute = ComputeType::kFloat32;
  int64_t a0 = 0, a1 = 0, b0 = 0, b1 = 0;
  int64_t m = 0, n = 0, k = 0;
};

// MatMul with attributes transpose_a and transpose_b. Impl::Run(ctx, a, b,
// dims, out), called only for a non-empty output (m, n > 0); k may be 0,
// when out must be zeroed.
template <typename Impl>
class MatMulKernel : public OpKernel {
 public:
  explicit MatMulKernel(OpKernelConstruction* c) : OpKernel(c) {
    if (!GetAttr(c, GetBoolAttrOr(c->def(), "transpose_a", false), &ta_)) return;
    if (!GetAttr(c, GetBoolAttrOr(c->def(), "transpose_b", false), &tb_)) return;
    GetAttr(c, ComputeTypeOf(c->def()), &compute_);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    OP_REQUIRES_OK(ctx, ExpectRank(a, 2, "a"));
    OP_REQUIRES_OK(ctx, ExpectRank(b, 2, "b"));
    MatMulDims d;
    d.ta = ta_;
    d.tb = tb_;
    d.compute = compute_;
    d.a0 = a.shape().dim(0), d.a1 = a.shape().dim(1);
    d.b0 = b.shape().dim(0), d.b1 = b.shape().dim(1);
    d.m = ta_ ? d.a1 : d.a0, d.k = ta_ ? d.a0 : d.a1;
    const int64_t kb = tb_ ? d.b1 : d.b0;
    d.n = tb_ ? d.b0 : d.b1;
    OP_REQUIRES(ctx, d.k == kb,
                absl::InvalidArgumentError(absl::StrCat("inner dimensions differ: ", a.shape().DebugString(),
                                                        ta_ ? "^T" : "", " x ", b.shape().DebugString(),
                                                        tb_ ? "^T" : "")));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, TensorShape{d.m, d.n});
    if (out == nullptr || d.m == 0 || d.n == 0) return;
    Impl::Run(ctx, a, b, d, out);
  }

 private:
  bool ta_ = false;
  bool tb_ = false;
  ComputeType compute_ = ComputeType::kFloat32;
};

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_MATH_KERNELS_H_
