// CPU kernels for PackTensors and UnpackTensors (graph/ops/transfer_ops.cc):
// one memcpy per tensor each way.
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
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
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      OP_REQUIRES(ctx, CheckedAdd(total, ctx->input(i).NumElements(), &total),
                  absl::InvalidArgumentError(absl::StrCat("input ", i, ": the packed size overflows 64 bits")));
    }
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
    if (!GetAttr(c, UnpackedShapes(c->def()), &shapes_)) return;
    for (const TensorShape& s : shapes_) {
      if (!CheckedAdd(total_, s.num_elements(), &total_)) {
        c->SetStatus(absl::InvalidArgumentError("attrs ranks, dims: the outputs' sizes overflow 64 bits"));
        return;
      }
    }
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& packed = ctx->input(0);
    const int64_t total = total_;
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
  int64_t total_ = 0;  // elements of all outputs
};

}  // namespace

WEFT_REGISTER_KERNEL("PackTensors", "CPU", PackTensorsOp);
WEFT_REGISTER_KERNEL("UnpackTensors", "CPU", UnpackTensorsOp);

}  // namespace cpu
}  // namespace weft
