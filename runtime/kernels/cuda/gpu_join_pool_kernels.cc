// GPU AvgPool (+Grad) and Concat (+Grad). Pooling runs the CUDA kernels of
// avg_pool.cu, which average over in-image positions only, as the CPU does
// (one path: it handles TensorFlow's uneven SAME padding, which cuDNN's
// legacy pooling cannot). The joins are strided copies on the device's
// stream: every input's rows land in their columns of the joined rows.
// Checks and outputs are the shared skeletons' (runtime/kernels/
// window_kernels.h, concat_kernels.h).
#include <cuda_runtime.h>

#include <vector>

#include "runtime/kernels/concat_kernels.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/window_checks.h"
#include "runtime/kernels/window_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {
namespace {

using kernels::ConcatLayout;
using kernels::PoolGeometry;

WindowGeometry Window(const PoolGeometry& g) {
  WindowGeometry w;
  w.n = g.n;
  w.h = g.h;
  w.w = g.w;
  w.c = g.c;
  w.kh = w.kw = g.k;
  w.ho = g.ho;
  w.wo = g.wo;
  w.pad_top = g.pad_top;
  w.pad_left = g.pad_left;
  w.stride = g.stride;
  return w;
}

struct AvgPool {
  static void Run(OpKernelContext* ctx, const PoolGeometry& g, const Tensor& x, Tensor* out) {
    OP_REQUIRES_CUDA(ctx, LaunchAvgPool(Window(g), x.data<float>(), out->data<float>(), Stream(ctx)),
                     "AvgPool kernel");
  }
};

struct AvgPoolGrad {
  static void Run(OpKernelContext* ctx, const PoolGeometry& g, const Tensor& grad, Tensor* out) {
    OP_REQUIRES_CUDA(ctx, LaunchAvgPoolGrad(Window(g), grad.data<float>(), out->data<float>(), Stream(ctx)),
                     "AvgPoolGrad kernel");
  }
};

constexpr size_t kF = sizeof(float);

struct Concat {
  static void Run(OpKernelContext* ctx, const ConcatLayout& l, Tensor* out) {
    float* y = out->data<float>();
    for (size_t k = 0; k < l.widths.size(); ++k) {
      if (l.widths[k] == 0) continue;
      const float* x = ctx->input(static_cast<int>(k)).data<float>();
      OP_REQUIRES_CUDA(ctx,
                       cudaMemcpy2DAsync(y + l.offsets[k], l.total * kF, x, l.widths[k] * kF, l.widths[k] * kF,
                                         l.rows, cudaMemcpyDeviceToDevice, Stream(ctx)),
                       "Concat copy");
    }
  }
};

struct ConcatGrad {
  static void Run(OpKernelContext* ctx, const ConcatLayout& l, const Tensor& grad, const std::vector<Tensor*>& outs) {
    const float* g = grad.data<float>();
    for (size_t k = 0; k < outs.size(); ++k) {
      if (outs[k] == nullptr) continue;
      OP_REQUIRES_CUDA(ctx,
                       cudaMemcpy2DAsync(outs[k]->data<float>(), l.widths[k] * kF, g + l.offsets[k], l.total * kF,
                                         l.widths[k] * kF, l.rows, cudaMemcpyDeviceToDevice, Stream(ctx)),
                       "ConcatGrad copy");
    }
  }
};

WEFT_REGISTER_KERNEL("AvgPool", "GPU", kernels::MaxPoolKernel<AvgPool>);
WEFT_REGISTER_KERNEL("AvgPoolGrad", "GPU", kernels::AvgPoolGradKernel<AvgPoolGrad>);
WEFT_REGISTER_KERNEL("Concat", "GPU", kernels::ConcatKernel<Concat>);
WEFT_REGISTER_KERNEL("ConcatGrad", "GPU", kernels::ConcatGradKernel<ConcatGrad>);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
