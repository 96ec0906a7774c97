// GPU kernels for BatchNorm (+Grad, Inference) and GlobalAvgPool (+Grad)
// (graph/ops/norm_ops.cc), on the skeletons the CPU kernels share
// (runtime/kernels/norm_kernels.h): the same checks, messages and outputs.
// The launches are norm.cu's; BatchNorm and its gradient take scratch for
// per-chunk partial sums when the batch has many rows.
#include <cstdint>
#include <utility>

#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/norm_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {
namespace {

using kernels::GlobalPoolGeometry;
using kernels::NormGeometry;

const float* F(const Tensor& t) { return t.data<float>(); }
float* F(Tensor* t) { return t->data<float>(); }

// The partial sums' scratch for `g` (none for one chunk).
bool PartialsScratch(OpKernelContext* ctx, const NormGeometry& g, Tensor* holder, float** floats) {
  return OptionalScratch(ctx, BatchNormScratchFloats(g.rows, g.channels), holder, floats);
}

struct BatchNorm {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& x, const Tensor& gamma,
                  const Tensor& beta, float epsilon, Tensor* y, Tensor* mean, Tensor* var, Tensor* inv_std) {
    Tensor holder;
    float* scratch = nullptr;
    if (!PartialsScratch(ctx, g, &holder, &scratch)) return;
    OP_REQUIRES_CUDA(ctx,
                     LaunchBatchNorm(F(x), F(gamma), F(beta), g.rows, g.channels, epsilon, scratch, F(y), F(mean),
                                     F(var), F(inv_std), Stream(ctx)),
                     "BatchNorm kernel");
  }
};

struct BatchNormGrad {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& dy, const Tensor& x,
                  const Tensor& gamma, const Tensor& mean, const Tensor& inv_std, Tensor* dx, Tensor* dgamma,
                  Tensor* dbeta) {
    Tensor holder;
    float* scratch = nullptr;
    if (!PartialsScratch(ctx, g, &holder, &scratch)) return;
    OP_REQUIRES_CUDA(ctx,
                     LaunchBatchNormGrad(F(dy), F(x), F(gamma), F(mean), F(inv_std), g.rows, g.channels, scratch,
                                         F(dx), F(dgamma), F(dbeta), Stream(ctx)),
                     "BatchNormGrad kernel");
  }
};

struct BatchNormInference {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& x, const Tensor& gamma,
                  const Tensor& beta, const Tensor& mean, const Tensor& var, float epsilon, Tensor* y) {
    OP_REQUIRES_CUDA(ctx,
                     LaunchBatchNormInference(F(x), F(gamma), F(beta), F(mean), F(var), g.rows, g.channels, epsilon,
                                              F(y), Stream(ctx)),
                     "BatchNormInference kernel");
  }
};

struct GlobalAvgPool {
  static void Run(OpKernelContext* ctx, const GlobalPoolGeometry& g, const Tensor& x, Tensor* out) {
    OP_REQUIRES_CUDA(ctx, LaunchGlobalAvgPool(F(x), g.n, g.hw, g.c, F(out), Stream(ctx)), "GlobalAvgPool kernel");
  }
};

struct GlobalAvgPoolGrad {
  static void Run(OpKernelContext* ctx, const GlobalPoolGeometry& g, const Tensor& grad, Tensor* dx) {
    OP_REQUIRES_CUDA(ctx, LaunchGlobalAvgPoolGrad(F(grad), g.n, g.hw, g.c, F(dx), Stream(ctx)),
                     "GlobalAvgPoolGrad kernel");
  }
};

WEFT_REGISTER_KERNEL("BatchNorm", "GPU", kernels::BatchNormKernel<BatchNorm>);
WEFT_REGISTER_KERNEL("BatchNormGrad", "GPU", kernels::BatchNormGradKernel<BatchNormGrad>);
WEFT_REGISTER_KERNEL("BatchNormInference", "GPU", kernels::BatchNormInferenceKernel<BatchNormInference>);
WEFT_REGISTER_KERNEL("GlobalAvgPool", "GPU", kernels::GlobalAvgPoolKernel<GlobalAvgPool>);
WEFT_REGISTER_KERNEL("GlobalAvgPoolGrad", "GPU", kernels::GlobalAvgPoolGradKernel<GlobalAvgPoolGrad>);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
