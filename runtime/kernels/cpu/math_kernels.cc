// CPU kernels for the math ops (graph/ops/math_ops.cc): BiasAdd(+Grad),
// Add/Sub/Mul/Neg, AddN, Sum/Mean (+Grad), ScaleRows, RowDot, ArgMax, Equal.
//
// Elementwise loops are plain loops over float pointers, which gcc vectorises
// at -O3; reductions use Eigen's vectorised redux.
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/cpu/math_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

// Elements per parallel block's worth of cheap elementwise work.
constexpr double kElementwiseCost = 1.0;

// ---- BiasAdd -------------------------------------------------------------------

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
    const int64_t rows = x.NumElements() / c;
    const float* xp = x.data<float>();
    const float* bp = bias.data<float>();
    float* op = out->data<float>();
    ParallelFor(ctx, rows, c * kElementwiseCost, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float* xr = xp + i * c;
        float* orow = op + i * c;
        for (int64_t j = 0; j < c; ++j) orow[j] = xr[j] + bp[j];
      }
    });
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
    if (out == nullptr) return;
    float* op = out->data<float>();
    std::fill(op, op + c, 0.0f);
    if (c == 0) return;
    const int64_t rows = g.NumElements() / c;
    const float* gp = g.data<float>();
    for (int64_t i = 0; i < rows; ++i) {
      const float* gr = gp + i * c;
      for (int64_t j = 0; j < c; ++j) op[j] += gr[j];
    }
  }
};

// ---- Elementwise ----------------------------------------------------------------

struct AddFn {
  static float Apply(float a, float b) { return a + b; }
};
struct SubFn {
  static float Apply(float a, float b) { return a - b; }
};
struct MulFn {
  static float Apply(float a, float b) { return a * b; }
};

// x (op) y for same shapes, or x (op) scalar y.
template <typename Fn>
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
    const float* xp = x.data<float>();
    const float* yp = y.data<float>();
    float* op = out->data<float>();
    ParallelFor(ctx, x.NumElements(), kElementwiseCost, [&](int64_t begin, int64_t end) {
      if (scalar_y) {
        const float s = yp[0];
        for (int64_t i = begin; i < end; ++i) op[i] = Fn::Apply(xp[i], s);
      } else {
        for (int64_t i = begin; i < end; ++i) op[i] = Fn::Apply(xp[i], yp[i]);
      }
    });
  }
};

class NegOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr) return;
    const float* xp = x.data<float>();
    float* op = out->data<float>();
    for (int64_t i = 0, n = x.NumElements(); i < n; ++i) op[i] = -xp[i];
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
    float* op = out->data<float>();
    const int n_in = ctx->num_inputs();
    ParallelFor(ctx, x0.NumElements(), n_in * kElementwiseCost, [&](int64_t begin, int64_t end) {
      const float* p0 = ctx->input(0).data<float>();
      if (n_in == 1) {
        std::memcpy(op + begin, p0 + begin, (end - begin) * sizeof(float));
        return;
      }
      // Pairs first so most passes read two inputs and write once.
      const float* p1 = ctx->input(1).data<float>();
      for (int64_t j = begin; j < end; ++j) op[j] = p0[j] + p1[j];
      for (int i = 2; i < n_in; ++i) {
        const float* p = ctx->input(i).data<float>();
        for (int64_t j = begin; j < end; ++j) op[j] += p[j];
      }
    });
  }
};

// ---- Reductions -------------------------------------------------------------------

template <bool kMean>
class ReduceAllOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, TensorShape{});
    if (out == nullptr) return;
    const int64_t n = x.NumElements();
    // Sum in float32 blocks (vectorised), accumulate the blocks in double.
    constexpr int64_t kBlock = 4096;
    double total = 0;
    for (int64_t i = 0; i < n; i += kBlock) {
      total += ConstArrayMap(x.data<float>() + i, std::min(kBlock, n - i)).sum();
    }
    if (kMean) total = n == 0 ? std::numeric_limits<double>::quiet_NaN() : total / static_cast<double>(n);
    *out->data<float>() = static_cast<float>(total);
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
    const int64_t n = x.NumElements();
    float v = *g.data<float>();
    if (kMean && n > 0) v /= static_cast<float>(n);
    std::fill(out->data<float>(), out->data<float>() + n, v);
  }
};

// ---- Row-wise -----------------------------------------------------------------------

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
    const float* mp = m.data<float>();
    const float* sp = s.data<float>();
    float* op = out->data<float>();
    for (int64_t i = 0; i < rows; ++i) {
      const float f = sp[i];
      for (int64_t j = 0; j < cols; ++j) op[i * cols + j] = mp[i * cols + j] * f;
    }
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
    float* op = out->data<float>();
    for (int64_t i = 0; i < rows; ++i) {
      op[i] = (ConstArrayMap(x.data<float>() + i * cols, cols) * ConstArrayMap(y.data<float>() + i * cols, cols)).sum();
    }
  }
};

// ---- Comparison ---------------------------------------------------------------------

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
    const int64_t rows = x.NumElements() / c;
    const float* xp = x.data<float>();
    int32_t* op = out->data<int32_t>();
    for (int64_t i = 0; i < rows; ++i) {
      const float* row = xp + i * c;
      int64_t best = 0;
      for (int64_t j = 1; j < c; ++j) {
        if (row[j] > row[best]) best = j;
      }
      op[i] = static_cast<int32_t>(best);
    }
  }
};

template <typename T>
void EqualLoop(const Tensor& x, const Tensor& y, Tensor* out) {
  const T* xp = x.data<T>();
  const T* yp = y.data<T>();
  bool* op = out->data<bool>();
  for (int64_t i = 0, n = x.NumElements(); i < n; ++i) op[i] = xp[i] == yp[i];
}

class EqualOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& y = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckEqualOperands(x, y));
    Tensor* out = ctx->allocate_output(0, DType::kBool, x.shape());
    if (out == nullptr) return;
    switch (x.dtype()) {
      case DType::kFloat32: EqualLoop<float>(x, y, out); break;
      case DType::kInt32: EqualLoop<int32_t>(x, y, out); break;
      case DType::kInt64: EqualLoop<int64_t>(x, y, out); break;
      case DType::kBool: EqualLoop<bool>(x, y, out); break;
      default:
        ctx->SetStatus(absl::InvalidArgumentError(absl::StrCat("Equal does not support ", DTypeName(x.dtype()))));
    }
  }
};

WEFT_REGISTER_KERNEL("BiasAdd", "CPU", BiasAddOp);
WEFT_REGISTER_KERNEL("BiasAddGrad", "CPU", BiasAddGradOp);
WEFT_REGISTER_KERNEL("Add", "CPU", BinaryOp<AddFn>);
WEFT_REGISTER_KERNEL("Sub", "CPU", BinaryOp<SubFn>);
WEFT_REGISTER_KERNEL("Mul", "CPU", BinaryOp<MulFn>);
WEFT_REGISTER_KERNEL("Neg", "CPU", NegOp);
WEFT_REGISTER_KERNEL("AddN", "CPU", AddNOp);
WEFT_REGISTER_KERNEL("Sum", "CPU", ReduceAllOp<false>);
WEFT_REGISTER_KERNEL("Mean", "CPU", ReduceAllOp<true>);
WEFT_REGISTER_KERNEL("SumGrad", "CPU", ReduceAllGradOp<false>);
WEFT_REGISTER_KERNEL("MeanGrad", "CPU", ReduceAllGradOp<true>);
WEFT_REGISTER_KERNEL("ScaleRows", "CPU", ScaleRowsOp);
WEFT_REGISTER_KERNEL("RowDot", "CPU", RowDotOp);
WEFT_REGISTER_KERNEL("ArgMax", "CPU", ArgMaxOp);
WEFT_REGISTER_KERNEL("Equal", "CPU", EqualOp);

}  // namespace
}  // namespace cpu
}  // namespace weft
