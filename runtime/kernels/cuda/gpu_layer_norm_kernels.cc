// GPU kernels for LayerNorm and LayerNormGrad (graph/ops/layer_norm_ops.cc),
// on the skeletons the CPU kernels share (runtime/kernels/layer_norm_kernels.h):
// the same checks, messages and outputs. The launches are layer_norm.cu's;
// the gradient takes scratch for per-chunk partial sums of dgamma and dbeta
// when there are many rows.
#include <cstdint>
#include <utility>

#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/layer_norm_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {
namespace {

using kernels::NormGeometry;

const float* F(const Tensor& t) { return t.data<float>(); }
float* F(Tensor* t) { return t->data<float>(); }

struct LayerNorm {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& x, const Tensor& gamma,
                  const Tensor& beta, float epsilon, Tensor* y, Tensor* mean, Tensor* inv_std) {
    OP_REQUIRES_CUDA(ctx,
                     LaunchLayerNorm(F(x), F(gamma), F(beta), g.rows, g.channels, epsilon, F(y), F(mean), F(inv_std),
                                     Stream(ctx)),
                     "LayerNorm kernel");
  }
};

struct LayerNormGrad {
  static void Run(OpKernelContext* ctx, const NormGeometry& g, const Tensor& dy, const Tensor& x,
                  const Tensor& gamma, const Tensor& mean, const Tensor& inv_std, Tensor* dx, Tensor* dgamma,
                  Tensor* dbeta) {
    Tensor holder;
    float* scratch = nullptr;
    if (const int64_t n = LayerNormGradScratchFloats(g.rows, g.channels); n > 0) {
      absl::StatusOr<Tensor> t = Scratch(ctx, n);
      OP_REQUIRES_OK(ctx, t.status());
      holder = *std::move(t);
      scratch = F(&holder);
    }
    OP_REQUIRES_CUDA(ctx,
                     LaunchLayerNormGrad(F(dy), F(x), F(gamma), F(mean), F(inv_std), g.rows, g.channels, scratch,
                                         F(dx), F(dgamma), F(dbeta), Stream(ctx)),
                     "LayerNormGrad kernel");
  }
};

WEFT_REGISTER_KERNEL("LayerNorm", "GPU", kernels::LayerNormKernel<LayerNorm>);
WEFT_REGISTER_KERNEL("LayerNormGrad", "GPU", kernels::LayerNormGradKernel<LayerNormGrad>);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
