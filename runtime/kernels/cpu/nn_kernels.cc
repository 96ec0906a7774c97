// CPU kernels for activations, Softmax, the sparse softmax cross-entropy loss
// and Dropout (graph/ops/nn_ops.cc). exp, tanh and the logistic function use
// Eigen's vectorised implementations.
#include <cmath>
#include <cstdint>
#include <functional>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/cpu/nn_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

// ---- Activations ---------------------------------------------------------------

// y = F(x), elementwise. F::Apply(in, out) works on Eigen array segments.
template <typename F>
class UnaryOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr) return;
    const float* xp = x.data<float>();
    float* op = out->data<float>();
    ParallelFor(ctx, x.NumElements(), F::kCost, [&](int64_t begin, int64_t end) {
      ConstArrayMap in(xp + begin, end - begin);
      ArrayMap o(op + begin, end - begin);
      F::Apply(in, o);
    });
  }
};

struct ReluFn {
  static constexpr double kCost = 1;
  static void Apply(const ConstArrayMap& x, ArrayMap& y) { y = x.max(0.0f); }
};
struct SigmoidFn {
  static constexpr double kCost = 20;
  static void Apply(const ConstArrayMap& x, ArrayMap& y) { y = x.logistic(); }
};
struct TanhFn {
  static constexpr double kCost = 20;
  static void Apply(const ConstArrayMap& x, ArrayMap& y) { y = x.tanh(); }
};

// out = F(a, b) for two same-shaped inputs.
template <typename F>
class BinaryGradOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    OP_REQUIRES_OK(ctx, ExpectSameShape(a, b, F::kRoleA, F::kRoleB));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, a.shape());
    if (out == nullptr) return;
    const float* ap = a.data<float>();
    const float* bp = b.data<float>();
    float* op = out->data<float>();
    ParallelFor(ctx, a.NumElements(), 2, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) op[i] = F::Apply(ap[i], bp[i]);
    });
  }
};

struct ReluGradFn {  // (g, x)
  static constexpr const char* kRoleA = "gradient";
  static constexpr const char* kRoleB = "x";
  static float Apply(float g, float x) { return x > 0.0f ? g : 0.0f; }
};
struct SigmoidGradFn {  // (y, g)
  static constexpr const char* kRoleA = "y";
  static constexpr const char* kRoleB = "gradient";
  static float Apply(float y, float g) { return g * y * (1.0f - y); }
};
struct TanhGradFn {  // (y, g)
  static constexpr const char* kRoleA = "y";
  static constexpr const char* kRoleB = "gradient";
  static float Apply(float y, float g) { return g * (1.0f - y * y); }
};

// ---- Softmax -------------------------------------------------------------------------

// Rows of the last axis: [rows, cols].
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
    OP_REQUIRES_OK(ctx, CheckLogits(x));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr) return;
    int64_t rows, cols;
    RowsAndCols(x, &rows, &cols);
    ParallelFor(ctx, rows, 20.0 * cols, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        ConstArrayMap xr(x.data<float>() + i * cols, cols);
        ArrayMap yr(out->data<float>() + i * cols, cols);
        yr = (xr - xr.maxCoeff()).exp();
        yr *= 1.0f / yr.sum();
      }
    });
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
    for (int64_t i = 0; i < rows; ++i) {
      ConstArrayMap yr(y.data<float>() + i * cols, cols);
      ConstArrayMap gr(g.data<float>() + i * cols, cols);
      ArrayMap dr(out->data<float>() + i * cols, cols);
      const float dot = (yr * gr).sum();
      dr = (gr - dot) * yr;
    }
  }
};

// ---- Loss ------------------------------------------------------------------------------

class SparseXentOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& logits = ctx->input(0);
    const Tensor& labels = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckSparseXentOperands(logits, labels));
    const int64_t n = logits.shape().dim(0), c = logits.shape().dim(1);
    const int32_t* lp = labels.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      OP_REQUIRES(ctx, lp[i] >= 0 && lp[i] < c,
                  absl::InvalidArgumentError(absl::StrCat("label ", lp[i], " in row ", i,
                                                          " is outside the valid range [0, ", c, ")")));
    }
    Tensor* loss = ctx->allocate_output(0, DType::kFloat32, TensorShape{n});
    Tensor* backprop = ctx->allocate_output(1, DType::kFloat32, TensorShape{n, c});
    if (loss == nullptr || backprop == nullptr) return;
    const float* zp = logits.data<float>();
    float* bp = backprop->data<float>();
    float* lossp = loss->data<float>();
    ParallelFor(ctx, n, 25.0 * c, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        ConstArrayMap z(zp + i * c, c);
        ArrayMap b(bp + i * c, c);
        const float max = z.maxCoeff();
        b = (z - max).exp();
        const float sum = b.sum();
        lossp[i] = std::log(sum) - (z[lp[i]] - max);
        b *= 1.0f / sum;
        b[lp[i]] -= 1.0f;
      }
    });
  }
};

// ---- Dropout ----------------------------------------------------------------------------

class DropoutOp : public OpKernel {
 public:
  explicit DropoutOp(OpKernelConstruction* c) : OpKernel(c) {
    GetAttr(c, DropoutParams::FromNode(c->def()), &p_);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* y = ctx->allocate_output(0, DType::kFloat32, x.shape());
    Tensor* mask = ctx->allocate_output(1, DType::kFloat32, x.shape());
    if (y == nullptr || mask == nullptr) return;
    const uint64_t key = p_.StepKey(ctx->step_id());
    const int64_t n = x.NumElements();
    const float* xp = x.data<float>();
    float* yp = y->data<float>();
    float* mp = mask->data<float>();
    const uint32_t threshold = p_.threshold;
    const float scale = p_.scale;
    // One 64-bit draw covers two elements.
    ParallelFor(ctx, (n + 1) / 2, 12, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        const uint64_t r = DropoutMix(key + static_cast<uint64_t>(j) * 0x9E3779B97F4A7C15ull);
        const int64_t i = 2 * j;
        mp[i] = static_cast<uint32_t>(r) >= threshold ? scale : 0.0f;
        yp[i] = xp[i] * mp[i];
        if (i + 1 < n) {
          mp[i + 1] = static_cast<uint32_t>(r >> 32) >= threshold ? scale : 0.0f;
          yp[i + 1] = xp[i + 1] * mp[i + 1];
        }
      }
    });
  }

 private:
  DropoutParams p_;
};

WEFT_REGISTER_KERNEL("Relu", "CPU", UnaryOp<ReluFn>);
WEFT_REGISTER_KERNEL("Sigmoid", "CPU", UnaryOp<SigmoidFn>);
WEFT_REGISTER_KERNEL("Tanh", "CPU", UnaryOp<TanhFn>);
WEFT_REGISTER_KERNEL("ReluGrad", "CPU", BinaryGradOp<ReluGradFn>);
WEFT_REGISTER_KERNEL("SigmoidGrad", "CPU", BinaryGradOp<SigmoidGradFn>);
WEFT_REGISTER_KERNEL("TanhGrad", "CPU", BinaryGradOp<TanhGradFn>);
WEFT_REGISTER_KERNEL("Softmax", "CPU", SoftmaxOp);
WEFT_REGISTER_KERNEL("SoftmaxGrad", "CPU", SoftmaxGradOp);
WEFT_REGISTER_KERNEL("SparseSoftmaxCrossEntropyWithLogits", "CPU", SparseXentOp);
WEFT_REGISTER_KERNEL("Dropout", "CPU", DropoutOp);

}  // namespace
}  // namespace cpu
}  // namespace weft
