// CPU kernels for the optimizer updates (graph/ops/training_ops.cc). Each
// writes into its variable inputs' buffers, which are the variables' own, and
// forwards `var` as output 0.
//
// Updates of one variable from concurrent steps (asynchronous replicas on a
// parameter server) are serialised by a lock chosen by the variable's buffer,
// so no update is lost; reads by other steps are not blocked (a replica may
// read a variable halfway through another's update, as in Hogwild).
#include <cmath>

#include <array>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

// Checks that var is float32 and each listed (input, role) has its shape.
absl::Status CheckLikeVar(OpKernelContext* ctx, std::initializer_list<std::pair<int, const char*>> inputs) {
  const Tensor& var = ctx->input(0);
  if (var.dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat("var must be float32, got ", DTypeName(var.dtype())));
  }
  for (const auto& [i, role] : inputs) {
    const Tensor& t = ctx->input(i);
    if (t.shape() != var.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(role, " ", t.shape().DebugString(), " must have var's shape ",
                                                     var.shape().DebugString()));
    }
  }
  return absl::OkStatus();
}

// A writable alias of input i: the copy shares (and so writes through to) the
// variable's buffer.
float* Mutable(OpKernelContext* ctx, int i) {
  Tensor alias = ctx->input(i);
  return alias.data<float>();
}

// Held while an update writes its variable (input 0) and slots.
class UpdateLock {
 public:
  explicit UpdateLock(const Tensor& var) : mu_(&Stripe(var.raw_data())) { mu_->Lock(); }
  ~UpdateLock() { mu_->Unlock(); }
  UpdateLock(const UpdateLock&) = delete;
  UpdateLock& operator=(const UpdateLock&) = delete;

 private:
  static absl::Mutex& Stripe(const void* p) {
    static std::array<absl::Mutex, 64> stripes;
    const auto key = reinterpret_cast<uintptr_t>(p) >> 6;  // buffers are 64-byte aligned
    return stripes[(key ^ (key >> 7) ^ (key >> 13)) % stripes.size()];
  }
  absl::Mutex* mu_;
};

class ApplyGradientDescentOp : public OpKernel {
 public:
  explicit ApplyGradientDescentOp(OpKernelConstruction* c) : OpKernel(c) {
    GetAttr(c, GetFloatAttr(c->def(), "learning_rate"), &lr_);
  }
  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, CheckLikeVar(ctx, {{1, "grad"}}));
    UpdateLock lock(ctx->input(0));
    float* var = Mutable(ctx, 0);
    const float* grad = ctx->input(1).data<float>();
    const float lr = lr_;
    ParallelFor(ctx, ctx->input(0).NumElements(), 2, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) var[i] -= lr * grad[i];
    });
    ctx->set_output(0, ctx->input(0));
  }

 private:
  float lr_ = 0;
};

class ApplyMomentumOp : public OpKernel {
 public:
  explicit ApplyMomentumOp(OpKernelConstruction* c) : OpKernel(c) {
    if (!GetAttr(c, GetFloatAttr(c->def(), "learning_rate"), &lr_)) return;
    if (!GetAttr(c, GetFloatAttr(c->def(), "momentum"), &momentum_)) return;
    GetAttr(c, GetBoolAttrOr(c->def(), "use_nesterov", false), &nesterov_);
  }
  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, CheckLikeVar(ctx, {{1, "accum"}, {2, "grad"}}));
    UpdateLock lock(ctx->input(0));
    float* var = Mutable(ctx, 0);
    float* accum = Mutable(ctx, 1);
    const float* grad = ctx->input(2).data<float>();
    const float lr = lr_, mu = momentum_;
    const bool nesterov = nesterov_;
    ParallelFor(ctx, ctx->input(0).NumElements(), 4, [&](int64_t begin, int64_t end) {
      if (nesterov) {
        for (int64_t i = begin; i < end; ++i) {
          accum[i] = accum[i] * mu + grad[i];
          var[i] -= lr * (grad[i] + mu * accum[i]);
        }
      } else {
        for (int64_t i = begin; i < end; ++i) {
          accum[i] = accum[i] * mu + grad[i];
          var[i] -= lr * accum[i];
        }
      }
    });
    ctx->set_output(0, ctx->input(0));
  }

 private:
  float lr_ = 0;
  float momentum_ = 0;
  bool nesterov_ = false;
};

class ApplyAdamOp : public OpKernel {
 public:
  explicit ApplyAdamOp(OpKernelConstruction* c) : OpKernel(c) {
    if (!GetAttr(c, GetFloatAttr(c->def(), "learning_rate"), &lr_)) return;
    if (!GetAttr(c, GetFloatAttr(c->def(), "beta1"), &beta1_)) return;
    if (!GetAttr(c, GetFloatAttr(c->def(), "beta2"), &beta2_)) return;
    GetAttr(c, GetFloatAttr(c->def(), "epsilon"), &epsilon_);
  }
  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, CheckLikeVar(ctx, {{1, "m"}, {2, "v"}, {4, "grad"}}));
    const Tensor& t_in = ctx->input(3);
    OP_REQUIRES(ctx, t_in.dtype() == DType::kFloat32 && t_in.NumElements() == 1,
                absl::InvalidArgumentError(absl::StrCat("t must be a float32 scalar, got ", DTypeName(t_in.dtype()),
                                                        t_in.shape().DebugString())));
    UpdateLock lock(ctx->input(0));
    float* t = Mutable(ctx, 3);
    *t += 1.0f;
    const double step = *t;
    const float lr_t = static_cast<float>(lr_ * std::sqrt(1.0 - std::pow(double{beta2_}, step)) /
                                          (1.0 - std::pow(double{beta1_}, step)));
    float* var = Mutable(ctx, 0);
    float* m = Mutable(ctx, 1);
    float* v = Mutable(ctx, 2);
    const float* grad = ctx->input(4).data<float>();
    const float b1 = beta1_, b2 = beta2_, eps = epsilon_;
    ParallelFor(ctx, ctx->input(0).NumElements(), 10, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float g = grad[i];
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        var[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
      }
    });
    ctx->set_output(0, ctx->input(0));
  }

 private:
  float lr_ = 0, beta1_ = 0.9f, beta2_ = 0.999f, epsilon_ = 1e-7f;
};

WEFT_REGISTER_KERNEL("ApplyGradientDescent", "CPU", ApplyGradientDescentOp);
WEFT_REGISTER_KERNEL("ApplyMomentum", "CPU", ApplyMomentumOp);
WEFT_REGISTER_KERNEL("ApplyAdam", "CPU", ApplyAdamOp);

}  // namespace
}  // namespace cpu
}  // namespace weft
