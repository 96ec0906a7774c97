// CPU kernels for PackTensors and UnpackTensors (graph/ops/transfer_ops.cc):
// one memcpy per tensor each way.
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
    int64_t total = 0;
    for (int i = 0; i < ctx->num_inputs(); ++i) total += ctx->input(i).NumElements();
    Tensor* out = ctx->allocate_output(0, ctx->input(0).dtype(), TensorShape{total});
    if (out == nullptr) return;
    char* dst = static_cast<char*>(out->raw_data());
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& x = ctx->input(i);
      OP_REQUIRES(ctx, x.dtype() == out->dtype(),
                  absl::InvalidArgumentError(absl::StrCat("input ", i, " is ", DTypeName(x.dtype()), ", input 0 is ",
                                                          DTypeName(out->dtype()))));
      if (x.TotalBytes() > 0) std::memcpy(dst, x.raw_data(), x.TotalBytes());
      dst += x.TotalBytes();
    }
  }
};

class UnpackTensorsOp : public OpKernel {
 public:
  explicit UnpackTensorsOp(OpKernelConstruction* c) : OpKernel(c) {
    if (!GetAttr(c, GetTypeAttr(c->def(), "T"), &dtype_)) return;
    GetAttr(c, UnpackedShapes(c->def()), &shapes_);
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& packed = ctx->input(0);
    int64_t total = 0;
    for (const TensorShape& s : shapes_) total += s.num_elements();
    OP_REQUIRES(ctx, packed.dtype() == dtype_ && packed.shape().rank() == 1 && packed.NumElements() == total,
                absl::InvalidArgumentError(absl::StrCat("packed tensor is ", DTypeName(packed.dtype()),
                                                        packed.shape().DebugString(), "; expected ", DTypeName(dtype_),
                                                        "[", total, "]")));
    const char* src = static_cast<const char*>(packed.raw_data());
    for (size_t i = 0; i < shapes_.size(); ++i) {
      Tensor* out = ctx->allocate_output(static_cast<int>(i), dtype_, shapes_[i]);
      if (out == nullptr) return;
      if (out->TotalBytes() > 0) std::memcpy(out->raw_data(), src, out->TotalBytes());
      src += out->TotalBytes();
    }
  }

 private:
  DType dtype_ = DType::kInvalid;
  std::vector<TensorShape> shapes_;
};

}  // namespace

WEFT_REGISTER_KERNEL("PackTensors", "CPU", PackTensorsOp);
WEFT_REGISTER_KERNEL("UnpackTensors", "CPU", UnpackTensorsOp);

}  // namespace cpu
}  // namespace weft
