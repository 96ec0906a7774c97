// CPU kernels for ConcatRows and SliceRows (graph/ops/shard_ops.cc): row
// ranges of row-major tensors, so each is one memcpy per shard.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

class ConcatRowsOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<TensorShape> shape = ConcatRowsOutputShape(ctx);
    OP_REQUIRES_OK(ctx, shape.status());
    Tensor* out = ctx->allocate_output(0, ctx->input(0).dtype(), *shape);
    if (out == nullptr) return;
    char* dst = static_cast<char*>(out->raw_data());
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& s = ctx->input(i);
      if (s.TotalBytes() > 0) std::memcpy(dst, s.raw_data(), s.TotalBytes());
      dst += s.TotalBytes();
    }
  }
};

class SliceRowsOp : public OpKernel {
 public:
  explicit SliceRowsOp(OpKernelConstruction* c) : OpKernel(c) {
    c->SetStatus(GetSliceRowsAttrs(c->def(), &begin_, &size_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    absl::StatusOr<size_t> offset = SliceRowsOffset(x, begin_, size_);
    OP_REQUIRES_OK(ctx, offset.status());
    TensorShape shape = x.shape();
    shape.set_dim(0, size_);
    Tensor* out = ctx->allocate_output(0, x.dtype(), shape);
    if (out == nullptr || out->TotalBytes() == 0) return;
    std::memcpy(out->raw_data(), static_cast<const char*>(x.raw_data()) + *offset, out->TotalBytes());
  }

 private:
  int64_t begin_ = 0;
  int64_t size_ = 0;
};

}  // namespace

WEFT_REGISTER_KERNEL("ConcatRows", "CPU", ConcatRowsOp);
WEFT_REGISTER_KERNEL("SliceRows", "CPU", SliceRowsOp);

}  // namespace cpu
}  // namespace weft
