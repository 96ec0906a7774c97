// CPU kernels for activations, Softmax, the sparse softmax cross-entropy loss
// and Dropout (graph/ops/nn_ops.cc). exp, tanh and the logistic function use
// Eigen's vectorised implementations. Checks and output allocation are the
// shared skeletons' (runtime/kernels/nn_kernels.h).
#include <cmath>
#include <cstdint>
#include <functional>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/nn_checks.h"
#include "runtime/kernels/nn_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

using kernels::DropoutMix;
using kernels::DropoutParams;

// ---- Activations ---------------------------------------------------------------

// y = F(x), elementwise. F::Apply(in, out) works on Eigen array segments.
template <typename F>
struct Activation {
  static void Run(OpKernelContext* ctx, const Tensor& x, Tensor* out) {
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
struct ActivationGrad {
  static void Run(OpKernelContext* ctx, const Tensor& a, const Tensor& b, Tensor* out) {
    const float* ap = a.data<float>();
    const float* bp = b.data<float>();
    float* op = out->data<float>();
    ParallelFor(ctx, a.NumElements(), 2, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) op[i] = F::Apply(ap[i], bp[i]);
    });
  }
};

struct ReluGradFn {  // (g, x)
  static float Apply(float g, float x) { return x > 0.0f ? g : 0.0f; }
};
struct SigmoidGradFn {  // (y, g)
  static float Apply(float y, float g) { return g * y * (1.0f - y); }
};
struct TanhGradFn {  // (y, g)
  static float Apply(float y, float g) { return g * (1.0f - y * y); }
};

// ---- Softmax -------------------------------------------------------------------------

struct Softmax {
  static void Run(OpKernelContext* ctx, const Tensor& x, int64_t rows, int64_t cols, Tensor* out) {
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

struct SoftmaxGrad {
  static void Run(OpKernelContext*, const Tensor& y, const Tensor& g, int64_t rows, int64_t cols, Tensor* out) {
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

class SparseXent {
 public:
  explicit SparseXent(OpKernelConstruction*) {}

  absl::Status CheckLabels(OpKernelContext*, const Tensor& labels, int64_t c) const {
    const int32_t* lp = labels.data<int32_t>();
    for (int64_t i = 0, n = labels.NumElements(); i < n; ++i) {
      if (lp[i] < 0 || lp[i] >= c) {
        return absl::InvalidArgumentError(
            absl::StrCat("label ", lp[i], " in row ", i, " is outside the valid range [0, ", c, ")"));
      }
    }
    return absl::OkStatus();
  }

  void Run(OpKernelContext* ctx, const Tensor& logits, const Tensor& labels, int64_t n, int64_t c, Tensor* loss,
           Tensor* backprop) const {
    const int32_t* lp = labels.data<int32_t>();
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

struct Dropout {
  static void Run(OpKernelContext* ctx, const DropoutParams& p, const Tensor& x, Tensor* y, Tensor* mask) {
    const uint64_t key = p.StepKey(ctx->step_id());
    const int64_t n = x.NumElements();
    const float* xp = x.data<float>();
    float* yp = y->data<float>();
    float* mp = mask->data<float>();
    const uint32_t threshold = p.threshold;
    const float scale = p.scale;
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
};

WEFT_REGISTER_KERNEL("Relu", "CPU", kernels::ActivationKernel<Activation<ReluFn>>);
WEFT_REGISTER_KERNEL("Sigmoid", "CPU", kernels::ActivationKernel<Activation<SigmoidFn>>);
WEFT_REGISTER_KERNEL("Tanh", "CPU", kernels::ActivationKernel<Activation<TanhFn>>);
// Aliases: the macro cannot take a template argument list with a comma.
using ReluGradKernel = kernels::ActivationGradKernel<kernels::ReluGradRoles, ActivationGrad<ReluGradFn>>;
using SigmoidGradKernel = kernels::ActivationGradKernel<kernels::SigmoidGradRoles, ActivationGrad<SigmoidGradFn>>;
using TanhGradKernel = kernels::ActivationGradKernel<kernels::TanhGradRoles, ActivationGrad<TanhGradFn>>;
WEFT_REGISTER_KERNEL("ReluGrad", "CPU", ReluGradKernel);
WEFT_REGISTER_KERNEL("SigmoidGrad", "CPU", SigmoidGradKernel);
WEFT_REGISTER_KERNEL("TanhGrad", "CPU", TanhGradKernel);
WEFT_REGISTER_KERNEL("Softmax", "CPU", kernels::SoftmaxKernel<Softmax>);
WEFT_REGISTER_KERNEL("SoftmaxGrad", "CPU", kernels::SoftmaxGradKernel<SoftmaxGrad>);
WEFT_REGISTER_KERNEL("SparseSoftmaxCrossEntropyWithLogits", "CPU", kernels::SparseXentKernel<SparseXent>);
WEFT_REGISTER_KERNEL("Dropout", "CPU", kernels::DropoutKernel<Dropout>);

}  // namespace
}  // namespace cpu
}  // namespace weft
