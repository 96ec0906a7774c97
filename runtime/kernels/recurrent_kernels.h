// The LSTM and GRU kernels (graph/ops/recurrent_ops.cc), written once for every
// device as norm_kernels.h: each class template checks its op's inputs,
// allocates the outputs and hands the operands to `Impl::Run`
// (cpu/recurrent_kernels.cc, cuda/gpu_recurrent_kernels.cc).
//
// Layouts are row-major: x [B, T, F], h and c [B, T, H], gates [B, T, 4H]
// with the blocks i, f, g, o side by side, kernel [F, 4H], recurrent_kernel
// [H, 4H]. With return_sequences, y is h itself (the same buffer).
//
// Thread-safety: kernels are immutable after construction; Compute may run
// concurrently.
#ifndef WEFT_RUNTIME_KERNELS_RECURRENT_KERNELS_H_
#define WEFT_RUNTIME_KERNELS_RECURRENT_KERNELS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/dtype.h"
#include "common/tensor.h"
#include "graph/attr.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace kernels {

struct LstmGeometry {
  int64_t batch = 0, steps = 0, features = 0, units = 0;
  int64_t blocks = 4;     // gate blocks: LSTM 4 (i, f, g, o), GRU 3 (z, r, n)
  bool sequences = true;  // return_sequences
  TensorShape state() const { return TensorShape{batch, steps, units}; }
  TensorShape gates() const { return TensorShape{batch, steps, blocks * units}; }
  TensorShape y() const { return sequences ? state() : TensorShape{batch, units}; }
};

// x (input x_input) and the kernel, recurrent_kernel and bias after it, of
// a layer of `blocks` gate blocks: bias [4H] for an LSTM, [2, 3H] for a GRU.
inline absl::StatusOr<LstmGeometry> CheckLstmInputs(OpKernelContext* ctx, int x_input, bool sequences,
                                                    int64_t blocks = 4) {
  const Tensor& x = ctx->input(x_input);
  const Tensor& w = ctx->input(x_input + 1);
  const Tensor& u = ctx->input(x_input + 2);
  const Tensor& b = ctx->input(x_input + 3);
  for (const auto& [t, role] : {std::pair{&x, "x"}, {&w, "kernel"}, {&u, "recurrent_kernel"}, {&b, "bias"}}) {
    if (absl::Status s = ExpectDType(*t, DType::kFloat32, role); !s.ok()) return s;
  }
  if (x.shape().rank() != 3 || x.shape().dim(1) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("x must be [batch, steps >= 1, features], got ", x.shape().DebugString()));
  }
  LstmGeometry g;
  g.batch = x.shape().dim(0);
  g.steps = x.shape().dim(1);
  g.features = x.shape().dim(2);
  g.units = u.shape().rank() == 2 ? u.shape().dim(0) : -1;
  g.blocks = blocks;
  g.sequences = sequences;
  int64_t width = 0;
  const bool gru = blocks == 3;
  if (g.units < 1 || !CheckedMul(g.units, blocks, &width) || u.shape() != TensorShape{g.units, width} ||
      w.shape() != TensorShape{g.features, width} ||
      b.shape() != (gru ? TensorShape{2, width} : TensorShape{width})) {
    const std::string n = absl::StrCat(blocks, " units");
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel ", w.shape().DebugString(), ", recurrent_kernel ", u.shape().DebugString(), " and bias ",
        b.shape().DebugString(), " must be [features, ", n, "], [units >= 1, ", n, "] and ", gru ? "[2, " : "[", n,
        "] for x ", x.shape().DebugString()));
  }
  return g;
}

inline bool ReadSequences(OpKernelConstruction* c) {
  absl::StatusOr<bool> seq = GetBoolAttrOr(c->def(), "return_sequences", true);
  if (!seq.ok()) c->SetStatus(seq.status());
  return seq.value_or(true);
}

// LSTM(x, kernel, recurrent_kernel, bias) -> (y, h, c, gates) and
// GRU(x, kernel, recurrent_kernel, bias) -> (y, h, gates, hn), kBlocks 4 and
// 3: Impl::Run(ctx, g, x, kernel, recurrent_kernel, bias, saved_1, saved_2,
// saved_3, y), the saved outputs in order and y null when it is h.
template <typename Impl, int64_t kBlocks>
class RecurrentKernel : public OpKernel {
 public:
  explicit RecurrentKernel(OpKernelConstruction* c) : OpKernel(c), sequences_(ReadSequences(c)) {}
  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<LstmGeometry> g = CheckLstmInputs(ctx, 0, sequences_, kBlocks);
    OP_REQUIRES_OK(ctx, g.status());
    Tensor* saved[3] = {};
    for (int k = 0; k < 3; ++k) {
      saved[k] = ctx->allocate_output(1 + k, DType::kFloat32, k == GatesAt() ? g->gates() : g->state());
      if (saved[k] == nullptr) return;
    }
    Tensor* y = nullptr;
    if (!sequences_) {
      y = ctx->allocate_output(0, DType::kFloat32, g->y());
      if (y == nullptr) return;
    }
    Impl::Run(ctx, *g, ctx->input(0), ctx->input(1), ctx->input(2), ctx->input(3), saved[0], saved[1], saved[2], y);
    if (sequences_) ctx->set_output(0, *saved[0]);  // y is h
  }

  // Which saved output holds the gates: an LSTM's third (after h and c), a
  // GRU's second (before hn).
  static constexpr int GatesAt() { return kBlocks == 4 ? 2 : 1; }

 private:
  const bool sequences_;
};

// LSTMGrad and GRUGrad(dy, x, kernel, recurrent_kernel, bias, saved_1,
// saved_2, saved_3) -> (dx, dkernel, drecurrent_kernel, dbias).
// Impl::Run(ctx, g, dy, x, kernel, recurrent_kernel, saved_1, saved_2,
//           saved_3, dx, dkernel, drecurrent_kernel, dbias).
template <typename Impl, int64_t kBlocks>
class RecurrentGradKernel : public OpKernel {
 public:
  explicit RecurrentGradKernel(OpKernelConstruction* c) : OpKernel(c), sequences_(ReadSequences(c)) {}
  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<LstmGeometry> g = CheckLstmInputs(ctx, 1, sequences_, kBlocks);
    OP_REQUIRES_OK(ctx, g.status());
    constexpr int kGates = RecurrentKernel<Impl, kBlocks>::GatesAt();
    const TensorShape want[] = {g->y(), kGates == 0 ? g->gates() : g->state(),
                                kGates == 1 ? g->gates() : g->state(), kGates == 2 ? g->gates() : g->state()};
    const char* roles[] = {"dy", "h", kBlocks == 4 ? "c" : "gates", kBlocks == 4 ? "gates" : "hn"};
    for (int k = 0; k < 4; ++k) {
      const Tensor& t = ctx->input(k == 0 ? 0 : 4 + k);
      OP_REQUIRES_OK(ctx, ExpectDType(t, DType::kFloat32, roles[k]));
      if (t.shape() != want[k]) {
        OP_REQUIRES_OK(ctx, absl::InvalidArgumentError(absl::StrCat(roles[k], " ", t.shape().DebugString(),
                                                                     " must be ", want[k].DebugString())));
      }
    }
    Tensor* outs[4] = {};
    for (int i = 0; i < 4; ++i) {
      outs[i] = ctx->allocate_output(i, DType::kFloat32, ctx->input(1 + i).shape());
      if (outs[i] == nullptr) return;
    }
    Impl::Run(ctx, *g, ctx->input(0), ctx->input(1), ctx->input(2), ctx->input(3), ctx->input(5), ctx->input(6),
              ctx->input(7), outs[0], outs[1], outs[2], outs[3]);
  }

 private:
  const bool sequences_;
};

template <typename Impl>
using LstmKernel = RecurrentKernel<Impl, 4>;
template <typename Impl>
using LstmGradKernel = RecurrentGradKernel<Impl, 4>;
template <typename Impl>
using GruKernel = RecurrentKernel<Impl, 3>;
template <typename Impl>
using GruGradKernel = RecurrentGradKernel<Impl, 3>;

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_RECURRENT_KERNELS_H_
