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
#include "absl/strings/str_cat.h"
#include "common/tensor.h"
#include "graph/attr.h"
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

// MicroBatch: micro-batch `index` of `count` (attributes) of x's rows, which
// must split evenly. Impl as SliceRows'.
template <typename Impl>
class MicroBatchKernel : public OpKernel {
 public:
  explicit MicroBatchKernel(OpKernelConstruction* c) : OpKernel(c) {
    absl::StatusOr<int64_t> index = GetIntAttr(c->def(), "index");
    absl::StatusOr<int64_t> count = GetIntAttr(c->def(), "count");
    if (!index.ok() || !count.ok()) {
      c->SetStatus(index.ok() ? count.status() : index.status());
      return;
    }
    index_ = *index;
    count_ = *count;
    if (count_ < 1 || index_ < 0 || index_ >= count_) {
      c->SetStatus(absl::InvalidArgumentError(
          absl::StrCat("micro-batch index ", index_, " of count ", count_, " needs 0 <= index < count")));
    }
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    if (x.shape().rank() < 1 || x.shape().dim(0) % count_ != 0) {
      OP_REQUIRES_OK(ctx, absl::InvalidArgumentError(absl::StrCat("a batch of shape ", x.shape().DebugString(),
                                                                   " does not split into ", count_,
                                                                   " equal micro-batches")));
    }
    const int64_t size = x.shape().dim(0) / count_;
    absl::StatusOr<size_t> offset = SliceRowsOffset(x, index_ * size, size);
    OP_REQUIRES_OK(ctx, offset.status());
    TensorShape shape = x.shape();
    shape.set_dim(0, size);
    Tensor* out = ctx->allocate_output(0, x.dtype(), shape);
    if (out == nullptr || out->TotalBytes() == 0) return;
    Impl::Run(ctx, static_cast<const char*>(x.raw_data()) + *offset, out);
  }

 private:
  int64_t index_ = 0;
  int64_t count_ = 1;
};

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_SHARD_KERNELS_H_
