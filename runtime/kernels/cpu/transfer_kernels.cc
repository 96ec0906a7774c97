// CPU kernels for PackTensors and UnpackTensors (graph/ops/transfer_ops.cc):
// PackTensors copies each input once into the packed layout (PackedLayout:
// every part from a 64-byte boundary, the gaps zeroed); UnpackTensors copies
// nothing, its outputs are views of the packed tensor.
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/ops/transfer_shapes.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

class PackTensorsOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const DType dtype = ctx->input(0).dtype();
    std::vector<int64_t> elements(static_cast<size_t>(ctx->num_inputs()));
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& x = ctx->input(i);
      OP_REQUIRES(ctx, x.dtype() == dtype,
                  absl::InvalidArgumentError(
                      absl::StrCat("input ", i, " is ", DTypeName(x.dtype()), ", input 0 is ", DTypeName(dtype))));
      elements[static_cast<size_t>(i)] = x.NumElements();
    }
    std::vector<int64_t> offsets;
    absl::StatusOr<int64_t> total = PackedLayout(elements, dtype, &offsets);
    OP_REQUIRES(ctx, total.ok(), total.status());
    Tensor* out = ctx->allocate_output(0, dtype, TensorShape{*total});
    if (out == nullptr) return;
    char* dst = static_cast<char*>(out->raw_data());
    const size_t size = DTypeSize(dtype);
    size_t end = 0;  // bytes written so far
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& x = ctx->input(i);
      const size_t start = static_cast<size_t>(offsets[static_cast<size_t>(i)]) * size;
      if (start > end) std::memset(dst + end, 0, start - end);  // never send stale memory
      if (x.TotalBytes() > 0) std::memcpy(dst + start, x.raw_data(), x.TotalBytes());
      end = start + x.TotalBytes();
    }
  }
};

class UnpackTensorsOp : public OpKernel {
 public:
  explicit UnpackTensorsOp(OpKernelConstruction* c) : OpKernel(c) {
    if (!GetAttr(c, GetTypeAttr(c->def(), "T"), &dtype_)) return;
    if (!GetAttr(c, UnpackedShapes(c->def()), &shapes_)) return;
    std::vector<int64_t> elements;
    for (const TensorShape& s : shapes_) elements.push_back(s.num_elements());
    absl::StatusOr<int64_t> total = PackedLayout(elements, dtype_, &offsets_);
    if (!total.ok()) {
      c->SetStatus(absl::InvalidArgumentError(absl::StrCat("attrs ranks, dims: ", total.status().message())));
      return;
    }
    total_ = *total;
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& packed = ctx->input(0);
    OP_REQUIRES(ctx, packed.dtype() == dtype_ && packed.shape().rank() == 1 && packed.NumElements() == total_,
                absl::InvalidArgumentError(absl::StrCat("packed tensor is ", DTypeName(packed.dtype()),
                                                        packed.shape().DebugString(), "; expected ", DTypeName(dtype_),
                                                        "[", total_, "]")));
    const size_t size = DTypeSize(dtype_);
    for (size_t i = 0; i < shapes_.size(); ++i) {
      absl::StatusOr<Tensor> part = packed.View(dtype_, shapes_[i], static_cast<size_t>(offsets_[i]) * size);
      OP_REQUIRES(ctx, part.ok(), part.status());
      ctx->set_output(static_cast<int>(i), *std::move(part));
    }
  }

 private:
  DType dtype_ = DType::kInvalid;
  std::vector<TensorShape> shapes_;
  std::vector<int64_t> offsets_;  // of each output in the packed tensor, in elements
  int64_t total_ = 0;             // elements of the packed tensor
};

}  // namespace

WEFT_REGISTER_KERNEL("PackTensors", "CPU", PackTensorsOp);
WEFT_REGISTER_KERNEL("UnpackTensors", "CPU", UnpackTensorsOp);

}  // namespace cpu
}  // namespace weft
