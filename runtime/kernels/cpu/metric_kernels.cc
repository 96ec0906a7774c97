// CPU kernel of InTopK (graph/ops/metric_ops.cc): the number of rows whose
// label is among the row's k largest logits, ties in the label's favour.
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/nn_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

class InTopKKernel : public OpKernel {
 public:
  explicit InTopKKernel(OpKernelConstruction* c) : OpKernel(c) {
    if (!GetAttr(c, GetIntAttr(c->def(), "k"), &k_)) return;
    if (k_ < 1) c->SetStatus(absl::InvalidArgumentError(absl::StrCat("k must be at least 1, got ", k_)));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& logits = ctx->input(0);
    const Tensor& labels = ctx->input(1);
    OP_REQUIRES_OK(ctx, kernels::CheckSparseXentOperands(logits, labels));
    OP_REQUIRES_OK(ctx, ExpectDType(logits, DType::kFloat32, "logits"));
    const int64_t n = logits.shape().dim(0), c = logits.shape().dim(1);
    const int32_t* lp = labels.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      if (lp[i] < 0 || lp[i] >= c) {
        ctx->SetStatus(absl::InvalidArgumentError(
            absl::StrCat("label ", lp[i], " in row ", i, " is outside the valid range [0, ", c, ")")));
        return;
      }
    }
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, TensorShape{});
    if (out == nullptr) return;
    const float* zp = logits.data<float>();
    int64_t hits = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float* row = zp + i * c;
      const float target = row[lp[i]];
      if (!std::isfinite(target)) continue;
      int64_t greater = 0;
      for (int64_t j = 0; j < c && greater < k_; ++j) greater += row[j] > target;
      hits += greater < k_;
    }
    out->data<float>()[0] = static_cast<float>(hits);
  }

 private:
  int64_t k_ = 1;
};

WEFT_REGISTER_KERNEL("InTopK", "CPU", InTopKKernel);

}  // namespace
}  // namespace cpu
}  // namespace weft
