// CPU kernels for the optimizer updates (graph/ops/training_ops.cc). Each
// writes into its variable inputs' buffers, which are the variables' own, and
// forwards `var` as output 0.
//
// Updates of one variable from concurrent steps (asynchronous replicas on a
// parameter server) are serialised by a lock chosen by the variable's buffer,
// so no update is lost; reads by other steps are not blocked (a replica may
// read a variable halfway through another's update, as in Hogwild). The
// update rules themselves are in apply_updates.h; attributes, checks and
// the output are the shared skeleton's (runtime/kernels/training_kernels.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "runtime/kernels/cpu/apply_updates.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/training_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

// A writable alias of input i: the copy shares (and so writes through to) the
// variable's buffer.
float* Mutable(OpKernelContext* ctx, int i) {
  Tensor alias = ctx->input(i);
  return alias.data<float>();
}

// The updates hold the variable's UpdateLock, as the k-of-N applies
// (sync_kernels.cc) do, so concurrent updates of one variable never
// interleave.
// Input i when the update has its optional count t there, or nullptr.
float* OptionalCount(OpKernelContext* ctx, int i) {
  return ctx->num_inputs() > i + 1 ? Mutable(ctx, i) : nullptr;
}

// Whether an update with skip_nonfinite skips this step: element 0 of its
// gradient (the last input) is not finite.
bool Skip(OpKernelContext* ctx, const kernels::RateParams& p) {
  if (!p.skip_nonfinite) return false;
  const Tensor& grad = ctx->input(ctx->num_inputs() - 1);
  return grad.NumElements() > 0 && !std::isfinite(grad.data<float>()[0]);
}

struct GradientDescent {
  explicit GradientDescent(OpKernelConstruction*) {}
  void Run(OpKernelContext* ctx, const GradientDescentParams& p) const {
    if (Skip(ctx, p)) return;
    UpdateLock lock(ctx->input(0));
    GradientDescentUpdate(ctx, p, ctx->input(0).NumElements(), Mutable(ctx, 0), OptionalCount(ctx, 1),
                          ctx->input(ctx->num_inputs() - 1).data<float>());
  }
};

struct Momentum {
  explicit Momentum(OpKernelConstruction*) {}
  void Run(OpKernelContext* ctx, const MomentumParams& p) const {
    if (Skip(ctx, p)) return;
    UpdateLock lock(ctx->input(0));
    MomentumUpdate(ctx, p, ctx->input(0).NumElements(), Mutable(ctx, 0), Mutable(ctx, 1), OptionalCount(ctx, 2),
                   ctx->input(ctx->num_inputs() - 1).data<float>());
  }
};

struct Adam {
  explicit Adam(OpKernelConstruction*) {}
  void Run(OpKernelContext* ctx, const AdamParams& p) const {
    if (Skip(ctx, p)) return;
    UpdateLock lock(ctx->input(0));
    AdamUpdate(ctx, p, ctx->input(0).NumElements(), Mutable(ctx, 0), Mutable(ctx, 1), Mutable(ctx, 2),
               Mutable(ctx, 3), ctx->input(4).data<float>());
  }
};

struct MovingAverage {
  explicit MovingAverage(OpKernelConstruction*) {}
  void Run(OpKernelContext* ctx, const kernels::MovingAverageParams& p) const {
    UpdateLock lock(ctx->input(0));
    MovingAverageUpdate(ctx, p, ctx->input(0).NumElements(), Mutable(ctx, 0), ctx->input(1).data<float>());
  }
};

// The sum of squares in double, one tensor after another; a tensor's
// elements in parallel when it is large.
struct GlobalNormScale {
  explicit GlobalNormScale(OpKernelConstruction*) {}
  void Run(OpKernelContext* ctx, float clip_norm, Tensor* scale, Tensor* norm) const {
    double sum = 0;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const float* g = ctx->input(i).data<float>();
      const int64_t n = ctx->input(i).NumElements();
      absl::Mutex mu;
      ParallelFor(ctx, n, 2, [&](int64_t begin, int64_t end) {
        double part = 0;
        for (int64_t j = begin; j < end; ++j) part += double{g[j]} * g[j];
        absl::MutexLock lock(&mu);
        sum += part;
      });
    }
    const double global = std::sqrt(sum);
    norm->data<float>()[0] = static_cast<float>(global);
    scale->data<float>()[0] = std::isfinite(global) ? static_cast<float>(clip_norm / std::max(global, double{clip_norm}))
                                                    : std::numeric_limits<float>::quiet_NaN();
  }
};

// Aliases: the macro cannot take a template argument list with a comma.
using ApplyGradientDescentKernel = kernels::ApplyKernel<kernels::GradientDescentOp, GradientDescent>;
using ApplyMomentumKernel = kernels::ApplyKernel<kernels::MomentumOp, Momentum>;
using ApplyAdamKernel = kernels::ApplyKernel<kernels::AdamOp, Adam>;
using ApplyMovingAverageKernel = kernels::ApplyKernel<kernels::MovingAverageOp, MovingAverage>;

WEFT_REGISTER_KERNEL("ApplyGradientDescent", "CPU", ApplyGradientDescentKernel);
WEFT_REGISTER_KERNEL("ApplyMomentum", "CPU", ApplyMomentumKernel);
WEFT_REGISTER_KERNEL("ApplyAdam", "CPU", ApplyAdamKernel);
WEFT_REGISTER_KERNEL("ApplyMovingAverage", "CPU", ApplyMovingAverageKernel);
WEFT_REGISTER_KERNEL("GlobalNormScale", "CPU", kernels::GlobalNormScaleKernel<GlobalNormScale>);

}  // namespace
}  // namespace cpu
}  // namespace weft
