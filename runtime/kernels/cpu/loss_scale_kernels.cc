// CPU kernels of dynamic loss scaling (graph/ops/loss_scale_ops.cc) on the
// shared skeletons (runtime/kernels/training_kernels.h).
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/kernels/cpu/apply_updates.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/training_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

// Every gradient divided by the scale in one pass that also looks for a
// non-finite element; a step that found one marks element 0 of every
// output.
struct UnscaleGradients {
  explicit UnscaleGradients(OpKernelConstruction*) {}
  void Run(OpKernelContext* ctx, const std::vector<Tensor*>& unscaled, Tensor* overflow) const {
    const float inv = 1.0f / ctx->input(0).data<float>()[0];
    bool bad = false;
    for (size_t i = 0; i < unscaled.size(); ++i) {
      const float* g = ctx->input(static_cast<int>(i) + 1).data<float>();
      float* out = unscaled[i]->data<float>();
      const int64_t n = unscaled[i]->NumElements();
      absl::Mutex mu;
      ParallelFor(ctx, n, 2, [&](int64_t begin, int64_t end) {
        bool part = false;
        for (int64_t j = begin; j < end; ++j) {
          part |= !std::isfinite(g[j]);
          out[j] = g[j] * inv;
        }
        if (part) {
          absl::MutexLock lock(&mu);
          bad = true;
        }
      });
    }
    const float nan = std::numeric_limits<float>::quiet_NaN();
    if (bad) {
      for (Tensor* u : unscaled) {
        if (u->NumElements() > 0) u->data<float>()[0] = nan;
      }
    }
    overflow->data<float>()[0] = bad ? nan : 0.0f;
  }
};

// Input 0 (the scale) and 1 (the good steps) are the variables' buffers.
struct ApplyLossScale {
  explicit ApplyLossScale(OpKernelConstruction*) {}
  void Run(OpKernelContext* ctx, float interval) const {
    UpdateLock lock(ctx->input(0));
    Tensor scale = ctx->input(0);
    Tensor good = ctx->input(1);
    kernels::NextLossScale(!std::isfinite(ctx->input(2).data<float>()[0]), interval, scale.data<float>(),
                           good.data<float>());
  }
};

WEFT_REGISTER_KERNEL("UnscaleGradients", "CPU", kernels::UnscaleGradientsKernel<UnscaleGradients>);
WEFT_REGISTER_KERNEL("ApplyLossScale", "CPU", kernels::ApplyLossScaleKernel<ApplyLossScale>);

}  // namespace
}  // namespace cpu
}  // namespace weft
