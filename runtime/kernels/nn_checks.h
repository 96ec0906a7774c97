// Input checks and parameters of the nn and optimizer ops, shared by their
// CPU kernels (cpu/nn_kernels.cc, cpu/training_kernels.cc) and GPU kernels
// (cuda/gpu_nn_kernels.cc, cuda/gpu_training_kernels.cc), so that
// a bad input gets the same error on either device, and Dropout draws the
// same mask on both. Each check returns INVALID_ARGUMENT naming the operand
// at fault.
//
// Thread-safety: pure functions; DropoutParams is immutable once built.
#ifndef WEFT_RUNTIME_KERNELS_NN_CHECKS_H_
#define WEFT_RUNTIME_KERNELS_NN_CHECKS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/tensor.h"
#include "graph/attr.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace kernels {

// Softmax: logits of rank >= 1 (softmax over the last dimension).
inline absl::Status CheckLogits(const Tensor& logits) {
  if (logits.shape().rank() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("logits must have rank >= 1, got shape ", logits.shape().DebugString()));
  }
  return absl::OkStatus();
}

// SparseSoftmaxCrossEntropyWithLogits: logits [n, c] and int32 labels [n].
// The labels' range is the device's to check (it reads them).
inline absl::Status CheckSparseXentOperands(const Tensor& logits, const Tensor& labels) {
  if (absl::Status s = ExpectRank(logits, 2, "logits"); !s.ok()) return s;
  if (absl::Status s = ExpectRank(labels, 1, "labels"); !s.ok()) return s;
  if (absl::Status s = ExpectDType(labels, DType::kInt32, "labels"); !s.ok()) return s;
  if (labels.shape().dim(0) != logits.shape().dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat("labels ", labels.shape().DebugString(),
                                                   " need one entry per row of logits ",
                                                   logits.shape().DebugString()));
  }
  return absl::OkStatus();
}

// The optimizer updates (ApplyGradientDescent, ...): input 0, var, is
// float32, and each listed (input, role) has var's shape.
inline absl::Status CheckLikeVar(OpKernelContext* ctx, std::initializer_list<std::pair<int, const char*>> inputs) {
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

// SplitMix64's output function: a strong 64-bit mixer, so Mix(key + counter)
// is a counter-based generator (any element can be computed independently).
inline uint64_t DropoutMix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Dropout's attributes and the parts of its random stream that do not
// depend on the element: element pair j of a step draws
// DropoutMix(StepKey(step) + j * 0x9E3779B97F4A7C15), its low 32 bits
// deciding element 2j and its high 32 bits element 2j + 1; an element is
// kept (and scaled) when its bits are >= threshold, so P(drop) = rate. The
// stream depends on the seed, the node's name and the step only, so both
// devices drop the same elements.
struct DropoutParams {
  float rate = 0;
  int64_t seed = 0;
  uint64_t name_hash = 0;
  uint32_t threshold = 0;
  float scale = 1;

  // Reads `rate` (in [0, 1)) and `seed` from the node.
  static absl::StatusOr<DropoutParams> FromNode(const NodeDef& node) {
    DropoutParams p;
    absl::StatusOr<float> rate = GetFloatAttr(node, "rate");
    if (!rate.ok()) return rate.status();
    absl::StatusOr<int64_t> seed = GetIntAttrOr(node, "seed", 0);
    if (!seed.ok()) return seed.status();
    p.rate = *rate;
    p.seed = *seed;
    if (!(p.rate >= 0.0f && p.rate < 1.0f)) {
      return absl::InvalidArgumentError(absl::StrCat("rate must be in [0, 1), got ", p.rate));
    }
    // FNV-1a: stable across builds and platforms, unlike std::hash.
    p.name_hash = 0xCBF29CE484222325ull;
    for (unsigned char ch : node.name()) p.name_hash = (p.name_hash ^ ch) * 0x100000001B3ull;
    p.threshold =
        static_cast<uint32_t>(std::min<double>(std::ldexp(static_cast<double>(p.rate), 32), 4294967295.0));
    p.scale = 1.0f / (1.0f - p.rate);
    return p;
  }

  uint64_t StepKey(int64_t step_id) const {
    return DropoutMix(static_cast<uint64_t>(seed) ^ DropoutMix(name_hash ^ DropoutMix(static_cast<uint64_t>(step_id))));
  }
};

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_NN_CHECKS_H_
