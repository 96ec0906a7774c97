// CPU kernels of the k-of-N synchronous replicas' ops (graph/ops/sync_ops.cc)
// over the accumulators of runtime/kernels/accumulator.h, one per variable in the
// device's resources ("accumulator/<name>").
//
// A push that is added but not the k-th is an AsyncOpKernel that parks its
// `done` in the accumulator: no executor thread waits. The k-th push applies
// the mean with the Apply* kernels' update rules (apply_updates.h) under the
// variable's UpdateLock, on its own thread, and releases the parked pushes.
// The step's rendezvous doubles as its cancellation signal: a parked push
// also waits on a rendezvous key that nothing sends, so the step's abort
// (AbortStep, a failed partition, worker shutdown) or cleanup completes it
// with that error and takes its gradient back out of the sum. Without a
// rendezvous (RunGraphOnce) a parked push waits for its apply alone.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "graph/partition.h"
#include "runtime/device.h"
#include "runtime/kernels/accumulator.h"
#include "runtime/kernels/cpu/apply_updates.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/op_kernel.h"
#include "runtime/rendezvous.h"

namespace weft {
namespace cpu {
namespace {


absl::StatusOr<std::shared_ptr<Accumulator>> FindAccumulator(OpKernelContext* ctx, const std::string& name, int k) {
  auto acc = ctx->resources()->LookupOrCreate<Accumulator>(
      absl::StrCat("accumulator/", name),
      [&]() -> absl::StatusOr<std::shared_ptr<Accumulator>> { return std::make_shared<Accumulator>(name, k); });
  if (!acc.ok()) return acc.status();
  if ((*acc)->num_required() != k) {
    return absl::FailedPreconditionError(absl::StrCat("accumulator '", name, "' aggregates ", (*acc)->num_required(),
                                                      " gradients per step, but this node asks for ", k));
  }
  return acc;
}

// The attrs every op of sync_ops.cc has.
struct AccumulatorAttrs {
  std::string name;
  int64_t k = 0;
  bool Init(OpKernelConstruction* c) {
    return GetAttr(c, GetStringAttr(c->def(), "accumulator"), &name) &&
           GetAttr(c, GetIntAttr(c->def(), "num_required"), &k);
  }
};

class AccumulatorStepOp : public OpKernel {
 public:
  explicit AccumulatorStepOp(OpKernelConstruction* c) : OpKernel(c) { attrs_.Init(c); }
  void Compute(OpKernelContext* ctx) override {
    auto acc = FindAccumulator(ctx, attrs_.name, static_cast<int>(attrs_.k));
    OP_REQUIRES_OK(ctx, acc.status());
    Tensor* out = ctx->allocate_output(0, DType::kInt64, TensorShape());
    if (out == nullptr) return;
    out->data<int64_t>()[0] = (*acc)->step();
  }

 private:
  AccumulatorAttrs attrs_;
};

// A writable alias of input i (the variable's own buffer).
float* Mutable(OpKernelContext* ctx, int i) {
  Tensor alias = ctx->input(i);
  return alias.data<float>();
}

// The update rules, by their Apply op: kSlots inputs between var and grad.
struct GradientDescentRule {
  static constexpr int kSlots = 0;
  GradientDescentParams p;
  bool Init(OpKernelConstruction* c) { return p.Init(c); }
  void Apply(OpKernelContext* ctx, const float* grad) const {
    GradientDescentUpdate(ctx, p, ctx->input(0).NumElements(), Mutable(ctx, 0), nullptr, grad);
  }
};

struct MomentumRule {
  static constexpr int kSlots = 1;
  MomentumParams p;
  bool Init(OpKernelConstruction* c) { return p.Init(c); }
  void Apply(OpKernelContext* ctx, const float* grad) const {
    MomentumUpdate(ctx, p, ctx->input(0).NumElements(), Mutable(ctx, 0), Mutable(ctx, 1), nullptr, grad);
  }
};

// t counts applies, so the bias correction follows global steps, not pushes.
struct AdamRule {
  static constexpr int kSlots = 3;
  AdamParams p;
  bool Init(OpKernelConstruction* c) { return p.Init(c); }
  void Apply(OpKernelContext* ctx, const float* grad) const {
    AdamUpdate(ctx, p, ctx->input(0).NumElements(), Mutable(ctx, 0), Mutable(ctx, 1), Mutable(ctx, 2),
               Mutable(ctx, 3), grad);
  }
};

// What a push's abort watch and the push itself share: the parked waiter's
// id once known, or the abort that came first.
struct PushState {
  absl::Mutex mu;
  std::shared_ptr<Accumulator> acc;
  int64_t waiter_id ABSL_GUARDED_BY(mu) = 0;
  absl::Status aborted ABSL_GUARDED_BY(mu);
};

template <typename Rule>
class AccumulateApplyOp : public AsyncOpKernel {
 public:
  static constexpr int kGrad = 1 + Rule::kSlots;
  static constexpr int kStep = kGrad + 1;

  explicit AccumulateApplyOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    if (!attrs_.Init(c) || !rule_.Init(c)) return;
    watch_name_ = absl::StrCat("accumulator_abort/", c->def().name());
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    absl::Status checked = Check(*ctx);
    if (!checked.ok()) {
      ctx->SetStatus(checked);
      return done();
    }
    auto found = FindAccumulator(ctx, attrs_.name, static_cast<int>(attrs_.k));
    if (!found.ok()) {
      ctx->SetStatus(found.status());
      return done();
    }
    Tensor* outcome = ctx->allocate_output(1, DType::kInt64, TensorShape());
    if (outcome == nullptr) return done();
    outcome->data<int64_t>()[0] = 0;  // set before the push: a parked push may finish at once
    ctx->set_output(0, ctx->input(0));

    auto state = std::make_shared<PushState>();
    state->acc = *std::move(found);
    Watch(ctx, state);
    {
      absl::MutexLock lock(&state->mu);
      if (!state->aborted.ok()) {
        ctx->SetStatus(state->aborted);
        return done();
      }
    }
    const int64_t local_step = ctx->input(kStep).data<int64_t>()[0];
    auto apply = [this, ctx](const Tensor& mean) {
      UpdateLock lock(ctx->input(0));
      rule_.Apply(ctx, mean.data<float>());
      return absl::OkStatus();
    };
    auto waiter = [ctx, done](const absl::Status& s) {
      if (!s.ok()) ctx->SetStatus(s);
      done();
    };
    Accumulator* acc = state->acc.get();
    auto pushed = acc->Push(local_step, ctx->input(kGrad), apply, waiter);
    if (!pushed.ok()) {
      ctx->SetStatus(pushed.status());
      return done();
    }
    switch (pushed->outcome) {
      case Accumulator::Outcome::kRefused:
        outcome->data<int64_t>()[0] = -1;
        return done();
      case Accumulator::Outcome::kApplied:
        outcome->data<int64_t>()[0] = 1;
        return done();
      case Accumulator::Outcome::kParked:
        break;
    }
    // Parked: `ctx` may be gone already. An abort that came while pushing
    // releases the waiter now; a later one finds its id.
    absl::Status aborted;
    {
      absl::MutexLock lock(&state->mu);
      state->waiter_id = pushed->waiter_id;
      aborted = state->aborted;
    }
    if (!aborted.ok()) acc->Abort(pushed->waiter_id, aborted);
  }

 private:
  absl::Status Check(const OpKernelContext& ctx) const {
    const Tensor& var = ctx.input(0);
    if (var.dtype() != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat("var must be float32, got ", DTypeName(var.dtype())));
    }
    for (int i = 1; i <= kGrad; ++i) {
      const Tensor& t = ctx.input(i);
      if (t.dtype() != DType::kFloat32) {
        return absl::InvalidArgumentError(absl::StrCat("input ", i, " must be float32, got ", DTypeName(t.dtype())));
      }
      const bool scalar_t = Rule::kSlots == 3 && i == 3;  // Adam's update count
      if (scalar_t ? t.NumElements() != 1 : t.shape() != var.shape()) {
        return absl::InvalidArgumentError(absl::StrCat("input ", i, " ", t.shape().DebugString(),
                                                       scalar_t ? " must be a scalar" : " must have var's shape ",
                                                       scalar_t ? "" : var.shape().DebugString()));
      }
    }
    const Tensor& step = ctx.input(kStep);
    if (step.dtype() != DType::kInt64 || step.NumElements() != 1) {
      return absl::InvalidArgumentError(absl::StrCat("local_step must be an int64 scalar, got ",
                                                     DTypeName(step.dtype()), step.shape().DebugString()));
    }
    return absl::OkStatus();
  }

  // Waits on a key of the step's rendezvous that nothing sends: the step's
  // abort or cleanup completes it.
  void Watch(OpKernelContext* ctx, const std::shared_ptr<PushState>& state) const {
    if (ctx->rendezvous() == nullptr) return;
    const std::string& device = ctx->device()->name();
    ctx->rendezvous()->RecvLocalAsync(
        RendezvousKey(device, 0, device, watch_name_, ctx->step_id()),
        [state](const absl::Status& s, const Tensor&, bool) {
          const absl::Status why =
              s.ok() ? absl::InternalError("an accumulator's abort key received a value") : s;
          int64_t id = 0;
          {
            absl::MutexLock lock(&state->mu);
            if (state->aborted.ok()) state->aborted = why;
            id = state->waiter_id;
          }
          if (id != 0) state->acc->Abort(id, why);
        });
  }

  AccumulatorAttrs attrs_;
  Rule rule_;
  std::string watch_name_;
};

WEFT_REGISTER_KERNEL("AccumulatorStep", "CPU", AccumulatorStepOp);
WEFT_REGISTER_KERNEL("AccumulateApplyGradientDescent", "CPU", AccumulateApplyOp<GradientDescentRule>);
WEFT_REGISTER_KERNEL("AccumulateApplyMomentum", "CPU", AccumulateApplyOp<MomentumRule>);
WEFT_REGISTER_KERNEL("AccumulateApplyAdam", "CPU", AccumulateApplyOp<AdamRule>);

}  // namespace
}  // namespace cpu
}  // namespace weft
