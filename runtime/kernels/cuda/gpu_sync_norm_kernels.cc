// GPU kernels for synchronised batch norm (graph/ops/sync_norm_ops.cc), on
// the skeletons the CPU kernels share (runtime/kernels/sync_norm_kernels.h):
// the same checks, messages and outputs. The launches are sync_norm.cu's;
// BatchNormSums and BatchNormFromSumsGrad take scratch for per-chunk partial
// sums when the batch has many rows. The count is read on the device only:
// one below 1 gives NaN statistics here where the CPU refuses it.
#include <cstdint>
#include <utility>

#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/sync_norm_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {
namespace {

using kernels::NormGeometry;

const float* F(const Tensor& t) { return t.data<float>(); }
float* F(Tensor* t) { return t->data<float>(); }

// The partial sums' scratch for `g` (none for one chunk).
bool PartialsScratch(OpKernelContext* ctx, const NormGeometry& g, Tensor* holder, float** floats) {
  return OptionalScratch(ctx, BatchNormSumsScratchFloats(g.rows, g.channels), holder, floats);
}

struct BatchNormSums {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& x, Tensor* sum, Tensor* sum_sq,
                  Tensor* count) {
    Tensor holder;
    float* scratch = nullptr;
    if (!PartialsScratch(ctx, g, &holder, &scratch)) return;
    OP_REQUIRES_CUDA(ctx,
                     LaunchBatchNormSums(F(x), g.rows, g.channels, scratch, F(sum), F(sum_sq), F(count),
                                         Stream(ctx)),
                     "BatchNormSums kernel");
  }
};

struct BatchNormSumsGrad {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& x, const Tensor& g_sum,
                  const Tensor& g_sum_sq, Tensor* dx) {
    OP_REQUIRES_CUDA(ctx,
                     LaunchBatchNormSumsGrad(F(x), F(g_sum), F(g_sum_sq), g.rows, g.channels, F(dx), Stream(ctx)),
                     "BatchNormSumsGrad kernel");
  }
};

struct BatchNormFromSums {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& x, const Tensor& gamma,
                  const Tensor& beta, const Tensor& sum, const Tensor& sum_sq, const Tensor& count, float epsilon,
                  Tensor* y, Tensor* mean, Tensor* var, Tensor* inv_std) {
    OP_REQUIRES_CUDA(ctx,
                     LaunchBatchNormFromSums(F(x), F(gamma), F(beta), F(sum), F(sum_sq), F(count), g.rows,
                                             g.channels, epsilon, F(y), F(mean), F(var), F(inv_std), Stream(ctx)),
                     "BatchNormFromSums kernel");
  }
};

struct BatchNormFromSumsGrad {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& dy, const Tensor& x,
                  const Tensor& gamma, const Tensor& mean, const Tensor& inv_std, const Tensor& count,
                  Tensor* const outs[5]) {
    Tensor holder;
    float* scratch = nullptr;
    if (!PartialsScratch(ctx, g, &holder, &scratch)) return;
    OP_REQUIRES_CUDA(ctx,
                     LaunchBatchNormFromSumsGrad(F(dy), F(x), F(gamma), F(mean), F(inv_std), F(count), g.rows,
                                                 g.channels, scratch, F(outs[0]), F(outs[1]), F(outs[2]),
                                                 F(outs[3]), F(outs[4]), Stream(ctx)),
                     "BatchNormFromSumsGrad kernel");
  }
};

WEFT_REGISTER_KERNEL("BatchNormSums", "GPU", kernels::BatchNormSumsKernel<BatchNormSums>);
WEFT_REGISTER_KERNEL("BatchNormSumsGrad", "GPU", kernels::BatchNormSumsGradKernel<BatchNormSumsGrad>);
WEFT_REGISTER_KERNEL("BatchNormFromSums", "GPU", kernels::BatchNormFromSumsKernel<BatchNormFromSums>);
WEFT_REGISTER_KERNEL("BatchNormFromSumsGrad", "GPU", kernels::BatchNormFromSumsGradKernel<BatchNormFromSumsGrad>);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
