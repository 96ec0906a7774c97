// The row-range ops' kernels (ConcatRows, SliceRows: graph/ops/shard_ops.cc)
// written once for every device as in math_kernels.h: each class template
// checks the shards or the slice (kernel_checks.h), allocates the output
// and hands the copy to `Impl`, the device's (cpu/shard_kernels.cc,
// cuda/gpu_state_kernels.cc). Tensors are row-major, so a row range is one
// contiguous run of bytes.
//
// Thread-safety: kernels are immutable after construction; Compute may run
// concurrently.
#ifndef WEFT_RUNTIME_KERNELS_SHARD_KERNELS_H_
#define WEFT_RUNTIME_KERNELS_SHARD_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace kernels {

// ConcatRows: the inputs' rows one after another.
// Impl::Run(ctx, out): copies every input into out in order.
template <typename Impl>
class ConcatRowsKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<TensorShape> shape = ConcatRowsOutputShape(ctx);
    OP_REQUIRES_OK(ctx, shape.status());
    Tensor* out = ctx->allocate_output(0, ctx->input(0).dtype(), *shape);
    if (out == nullptr) return;
    Impl::Run(ctx, out);
  }
};

// SliceRows: rows [begin, begin + size) of x (attributes begin, size).
// Impl::Run(ctx, src, out): copies out->TotalBytes() bytes from src (inside
// x) into a non-empty out.
template <typename Impl>
class SliceRowsKernel : public OpKernel {
 public:
  explicit SliceRowsKernel(OpKernelConstruction* c) : OpKernel(c) {
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
    Impl::Run(ctx, static_cast<const char*>(x.raw_data()) + *offset, out);
  }

 private:
  int64_t begin_ = 0;
  int64_t size_ = 0;
};

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_SHARD_KERNELS_H_
