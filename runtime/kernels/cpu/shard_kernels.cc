// CPU kernels for ConcatRows and SliceRows (graph/ops/shard_ops.cc): row
// ranges of row-major tensors, so each is one memcpy per shard.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

class ConcatRowsOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& first = ctx->input(0);
    std::vector<int64_t> dims(first.shape().dims().begin(), first.shape().dims().end());
    int64_t rows = 0;
    for (int i = 0; i < ctx->num_inputs(); ++i) rows += ctx->input(i).shape().dim(0);
    dims[0] = rows;
    Tensor* out = ctx->allocate_output(0, first.dtype(), TensorShape(dims));
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
    if (!GetAttr(c, GetIntAttr(c->def(), "begin"), &begin_)) return;
    GetAttr(c, GetIntAttr(c->def(), "size"), &size_);
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    OP_REQUIRES(ctx, x.shape().rank() >= 1 && begin_ + size_ <= x.shape().dim(0),
                absl::InvalidArgumentError(absl::StrCat("rows [", begin_, ", ", begin_ + size_, ") are outside ",
                                                        x.shape().DebugString())));
    std::vector<int64_t> dims(x.shape().dims().begin(), x.shape().dims().end());
    const size_t row_bytes = x.shape().dim(0) > 0 ? x.TotalBytes() / static_cast<size_t>(x.shape().dim(0)) : 0;
    dims[0] = size_;
    Tensor* out = ctx->allocate_output(0, x.dtype(), TensorShape(dims));
    if (out == nullptr || out->TotalBytes() == 0) return;
    std::memcpy(out->raw_data(), static_cast<const char*>(x.raw_data()) + row_bytes * begin_, out->TotalBytes());
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
