// GPU kernel of InTopK (graph/ops/metric_ops.cc; metric.cu). The operands
// are checked on the host as on the CPU; the labels' range is not, since
// reading them would wait for the device: a label outside [0, C) counts as
// a miss here where the CPU refuses it.
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "graph/attr.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/kernels/nn_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {
namespace {

class InTopKKernel : public OpKernel {
 public:
  explicit InTopKKernel(OpKernelConstruction* c) : OpKernel(c) {
    if (!kernels::GetAttr(c, GetIntAttr(c->def(), "k"), &k_)) return;
    if (k_ < 1) c->SetStatus(absl::InvalidArgumentError(absl::StrCat("k must be at least 1, got ", k_)));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& logits = ctx->input(0);
    const Tensor& labels = ctx->input(1);
    OP_REQUIRES_OK(ctx, kernels::CheckSparseXentOperands(logits, labels));
    OP_REQUIRES_OK(ctx, kernels::ExpectDType(logits, DType::kFloat32, "logits"));
    const int64_t n = logits.shape().dim(0), c = logits.shape().dim(1);
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, TensorShape{});
    if (out == nullptr) return;
    OP_REQUIRES_CUDA(ctx,
                     LaunchInTopK(logits.data<float>(), labels.data<int32_t>(), n, c, k_, out->data<float>(),
                                  Stream(ctx)),
                     "InTopK kernel");
  }

 private:
  int64_t k_ = 1;
};

WEFT_REGISTER_KERNEL("InTopK", "GPU", InTopKKernel);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
