// CPU kernels for the math ops (graph/ops/math_ops.cc): BiasAdd(+Grad),
// Add/Sub/Mul/Neg, AddN, Sum/Mean (+Grad), ScaleRows, RowDot, ArgMax, Equal.
// Checks and output allocation are the shared skeletons' (math_kernels.h);
// this file holds the CPU's computation of each.
//
// Elementwise loops are plain loops over float pointers, which gcc vectorises
// at -O3; reductions use Eigen's vectorised redux.
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/math_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

// Elements per parallel block's worth of cheap elementwise work.
constexpr double kElementwiseCost = 1.0;

// ---- BiasAdd -------------------------------------------------------------------

struct BiasAdd {
  static void Run(OpKernelContext* ctx, const Tensor& x, const Tensor& bias, Tensor* out) {
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

struct BiasAddGrad {
  static void Run(OpKernelContext*, const Tensor& g, int64_t c, Tensor* out) {
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

template <typename Fn>
struct Binary {
  static void Run(OpKernelContext* ctx, const Tensor& x, const Tensor& y, bool scalar_y, Tensor* out) {
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

struct Neg {
  static void Run(OpKernelContext*, const Tensor& x, Tensor* out) {
    const float* xp = x.data<float>();
    float* op = out->data<float>();
    for (int64_t i = 0, n = x.NumElements(); i < n; ++i) op[i] = -xp[i];
  }
};

struct AddN {
  static void Run(OpKernelContext* ctx, Tensor* out) {
    float* op = out->data<float>();
    const int n_in = ctx->num_inputs();
    ParallelFor(ctx, ctx->input(0).NumElements(), n_in * kElementwiseCost, [&](int64_t begin, int64_t end) {
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
struct ReduceAll {
  static void Run(OpKernelContext*, const Tensor& x, Tensor* out) {
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
struct ReduceAllGrad {
  static void Run(OpKernelContext*, const Tensor& g, const Tensor& x, Tensor* out) {
    const int64_t n = x.NumElements();
    float v = *g.data<float>();
    if (kMean && n > 0) v /= static_cast<float>(n);
    std::fill(out->data<float>(), out->data<float>() + n, v);
  }
};

// ---- Row-wise -----------------------------------------------------------------------

struct ScaleRows {
  static void Run(OpKernelContext*, const Tensor& m, const Tensor& s, int64_t rows, int64_t cols, Tensor* out) {
    const float* mp = m.data<float>();
    const float* sp = s.data<float>();
    float* op = out->data<float>();
    for (int64_t i = 0; i < rows; ++i) {
      const float f = sp[i];
      for (int64_t j = 0; j < cols; ++j) op[i * cols + j] = mp[i * cols + j] * f;
    }
  }
};

struct RowDot {
  static void Run(OpKernelContext*, const Tensor& x, const Tensor& y, int64_t rows, int64_t cols, Tensor* out) {
    float* op = out->data<float>();
    for (int64_t i = 0; i < rows; ++i) {
      op[i] = (ConstArrayMap(x.data<float>() + i * cols, cols) * ConstArrayMap(y.data<float>() + i * cols, cols)).sum();
    }
  }
};

// ---- Comparison ---------------------------------------------------------------------

struct ArgMax {
  static void Run(OpKernelContext*, const Tensor& x, int64_t rows, int64_t c, Tensor* out) {
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

struct Equal {
  static void Run(OpKernelContext* ctx, const Tensor& x, const Tensor& y, Tensor* out) {
    switch (x.dtype()) {
      case DType::kFloat32: EqualLoop<float>(x, y, out); break;
      case DType::kInt32: EqualLoop<int32_t>(x, y, out); break;
      case DType::kInt64: EqualLoop<int64_t>(x, y, out); break;
      case DType::kBool: EqualLoop<bool>(x, y, out); break;
      default:  // EqualKernel admits only the four above
        ctx->SetStatus(absl::InvalidArgumentError(absl::StrCat("Equal does not support ", DTypeName(x.dtype()))));
    }
  }
};

WEFT_REGISTER_KERNEL("BiasAdd", "CPU", kernels::BiasAddKernel<BiasAdd>);
WEFT_REGISTER_KERNEL("BiasAddGrad", "CPU", kernels::BiasAddGradKernel<BiasAddGrad>);
WEFT_REGISTER_KERNEL("Add", "CPU", kernels::BinaryKernel<Binary<AddFn>>);
WEFT_REGISTER_KERNEL("Sub", "CPU", kernels::BinaryKernel<Binary<SubFn>>);
WEFT_REGISTER_KERNEL("Mul", "CPU", kernels::BinaryKernel<Binary<MulFn>>);
WEFT_REGISTER_KERNEL("Neg", "CPU", kernels::NegKernel<Neg>);
WEFT_REGISTER_KERNEL("AddN", "CPU", kernels::AddNKernel<AddN>);
WEFT_REGISTER_KERNEL("Sum", "CPU", kernels::ReduceAllKernel<ReduceAll<false>>);
WEFT_REGISTER_KERNEL("Mean", "CPU", kernels::ReduceAllKernel<ReduceAll<true>>);
WEFT_REGISTER_KERNEL("SumGrad", "CPU", kernels::ReduceAllGradKernel<ReduceAllGrad<false>>);
WEFT_REGISTER_KERNEL("MeanGrad", "CPU", kernels::ReduceAllGradKernel<ReduceAllGrad<true>>);
WEFT_REGISTER_KERNEL("ScaleRows", "CPU", kernels::ScaleRowsKernel<ScaleRows>);
WEFT_REGISTER_KERNEL("RowDot", "CPU", kernels::RowDotKernel<RowDot>);
WEFT_REGISTER_KERNEL("ArgMax", "CPU", kernels::ArgMaxKernel<ArgMax>);
WEFT_REGISTER_KERNEL("Equal", "CPU", kernels::EqualKernel<Equal>);

}  // namespace
}  // namespace cpu
}  // namespace weft
