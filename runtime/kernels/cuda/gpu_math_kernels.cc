// GPU kernels for the math ops (graph/ops/math_ops.cc): BiasAdd(+Grad),
// Add/Sub/Mul/Neg, AddN, Sum/Mean (+Grad), ScaleRows, RowDot, ArgMax, Equal.
// Checks, error messages and output allocation are the skeletons the CPU
// kernels share (runtime/kernels/math_kernels.h); the work is one launch per
// op (AddN: one per 16 inputs; BiasAddGrad: two when it has many rows).
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/math_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {
namespace {

const float* F(const Tensor& t) { return t.data<float>(); }
float* F(Tensor* t) { return t->data<float>(); }

struct BiasAdd {
  static void Run(OpKernelContext* ctx, const Tensor& x, const Tensor& bias, Tensor* out) {
    const int64_t c = bias.NumElements();
    if (c == 0) return;
    OP_REQUIRES_CUDA(ctx, LaunchBiasAdd(F(x), F(bias), F(out), x.NumElements() / c, c, Stream(ctx)),
                     "BiasAdd kernel");
  }
};

struct BiasAddGrad {
  static void Run(OpKernelContext* ctx, const Tensor& g, int64_t c, Tensor* out) {
    if (c == 0) return;
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

template <BinaryFn kFn>
struct Binary {
  static void Run(OpKernelContext* ctx, const Tensor& x, const Tensor& y, bool scalar_y, Tensor* out) {
    OP_REQUIRES_CUDA(ctx, LaunchBinary(kFn, F(x), F(y), scalar_y, F(out), x.NumElements(), Stream(ctx)),
                     "binary elementwise kernel");
  }
};

struct Neg {
  static void Run(OpKernelContext* ctx, const Tensor& x, Tensor* out) {
    OP_REQUIRES_CUDA(ctx, LaunchUnary(UnaryFn::kNeg, F(x), F(out), x.NumElements(), Stream(ctx)), "Neg kernel");
  }
};

struct AddN {
  static void Run(OpKernelContext* ctx, Tensor* out) {
    // Up to 16 inputs per launch; further launches add the next ones in
    // order, keeping the CPU's left-to-right sum.
    const float* in[kAddNMaxInputs];
    const int64_t n = ctx->input(0).NumElements();
    for (int first = 0; first < ctx->num_inputs(); first += kAddNMaxInputs) {
      const int count = std::min(kAddNMaxInputs, ctx->num_inputs() - first);
      for (int k = 0; k < count; ++k) in[k] = F(ctx->input(first + k));
      OP_REQUIRES_CUDA(ctx, LaunchAddN(in, count, first > 0, F(out), n, Stream(ctx)), "AddN kernel");
    }
  }
};

template <bool kMean>
struct ReduceAll {
  static void Run(OpKernelContext* ctx, const Tensor& x, Tensor* out) {
    OP_REQUIRES_CUDA(ctx, LaunchReduceAll(F(x), x.NumElements(), kMean, F(out), Stream(ctx)),
                     kMean ? "Mean kernel" : "Sum kernel");
  }
};

template <bool kMean>
struct ReduceAllGrad {
  static void Run(OpKernelContext* ctx, const Tensor& g, const Tensor& x, Tensor* out) {
    OP_REQUIRES_CUDA(ctx, LaunchFillFromScalar(F(g), kMean, F(out), x.NumElements(), Stream(ctx)),
                     kMean ? "MeanGrad kernel" : "SumGrad kernel");
  }
};

struct ScaleRows {
  static void Run(OpKernelContext* ctx, const Tensor& m, const Tensor& s, int64_t rows, int64_t cols, Tensor* out) {
    OP_REQUIRES_CUDA(ctx, LaunchScaleRows(F(m), F(s), F(out), rows, cols, Stream(ctx)), "ScaleRows kernel");
  }
};

struct RowDot {
  static void Run(OpKernelContext* ctx, const Tensor& x, const Tensor& y, int64_t rows, int64_t cols, Tensor* out) {
    OP_REQUIRES_CUDA(ctx, LaunchRowDot(F(x), F(y), F(out), rows, cols, Stream(ctx)), "RowDot kernel");
  }
};

struct ArgMax {
  static void Run(OpKernelContext* ctx, const Tensor& x, int64_t rows, int64_t c, Tensor* out) {
    OP_REQUIRES_CUDA(ctx, LaunchArgMax(F(x), out->data<int32_t>(), rows, c, Stream(ctx)), "ArgMax kernel");
  }
};

struct Equal {
  static void Run(OpKernelContext* ctx, const Tensor& x, const Tensor& y, Tensor* out) {
    OP_REQUIRES_CUDA(ctx,
                     LaunchEqual(static_cast<ElemType>(x.dtype()), x.raw_data(), y.raw_data(), out->data<bool>(),
                                 x.NumElements(), Stream(ctx)),
                     "Equal kernel");
  }
};

WEFT_REGISTER_KERNEL("BiasAdd", "GPU", kernels::BiasAddKernel<BiasAdd>);
WEFT_REGISTER_KERNEL("BiasAddGrad", "GPU", kernels::BiasAddGradKernel<BiasAddGrad>);
WEFT_REGISTER_KERNEL("Add", "GPU", kernels::BinaryKernel<Binary<BinaryFn::kAdd>>);
WEFT_REGISTER_KERNEL("Sub", "GPU", kernels::BinaryKernel<Binary<BinaryFn::kSub>>);
WEFT_REGISTER_KERNEL("Mul", "GPU", kernels::BinaryKernel<Binary<BinaryFn::kMul>>);
WEFT_REGISTER_KERNEL("Neg", "GPU", kernels::NegKernel<Neg>);
WEFT_REGISTER_KERNEL("AddN", "GPU", kernels::AddNKernel<AddN>);
WEFT_REGISTER_KERNEL("Sum", "GPU", kernels::ReduceAllKernel<ReduceAll<false>>);
WEFT_REGISTER_KERNEL("Mean", "GPU", kernels::ReduceAllKernel<ReduceAll<true>>);
WEFT_REGISTER_KERNEL("SumGrad", "GPU", kernels::ReduceAllGradKernel<ReduceAllGrad<false>>);
WEFT_REGISTER_KERNEL("MeanGrad", "GPU", kernels::ReduceAllGradKernel<ReduceAllGrad<true>>);
WEFT_REGISTER_KERNEL("ScaleRows", "GPU", kernels::ScaleRowsKernel<ScaleRows>);
WEFT_REGISTER_KERNEL("RowDot", "GPU", kernels::RowDotKernel<RowDot>);
WEFT_REGISTER_KERNEL("ArgMax", "GPU", kernels::ArgMaxKernel<ArgMax>);
WEFT_REGISTER_KERNEL("Equal", "GPU", kernels::EqualKernel<Equal>);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
