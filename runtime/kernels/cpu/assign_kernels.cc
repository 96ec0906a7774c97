// CPU kernels for Assign and AssignAdd (graph/ops/assign_ops.cc). Each writes
// through input 0, which shares the variable's buffer, under the variable's
// UpdateLock (apply_updates.h) so that it never interleaves with an
// optimizer update or another assignment of the same variable, and forwards
// the variable as output 0.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/cpu/apply_updates.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

// The value must match the variable exactly at run time (the graph's shapes
// may have had unknown dimensions).
absl::Status CheckValue(const Tensor& var, const Tensor& value) {
  if (value.dtype() != var.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("value is ", DTypeName(value.dtype()), ", the variable is ", DTypeName(var.dtype())));
  }
  if (value.shape() != var.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("value ", value.shape().DebugString(),
                                                   " does not have the variable's shape ", var.shape().DebugString()));
  }
  return absl::OkStatus();
}

class AssignOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    Tensor var = ctx->input(0);  // an alias of the variable's buffer
    const Tensor& value = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckValue(var, value));
    if (var.TotalBytes() > 0 && var.raw_data() != value.raw_data()) {
      UpdateLock lock(var);
      std::memcpy(var.raw_data(), value.raw_data(), var.TotalBytes());
    }
    ctx->set_output(0, std::move(var));
  }
};

class AssignAddOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    Tensor var = ctx->input(0);
    const Tensor& value = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckValue(var, value));
    if (var.dtype() == DType::kFloat32) {
      Add<float>(var, value);
    } else if (var.dtype() == DType::kInt64) {
      Add<int64_t>(var, value);  // a step counter: wraps like the hardware, never past 2^63 steps
    } else {
      ctx->SetStatus(absl::InvalidArgumentError(
          absl::StrCat("the variable must be float32 or int64, got ", DTypeName(var.dtype()))));
      return;
    }
    ctx->set_output(0, std::move(var));
  }

 private:
  template <typename T>
  static void Add(Tensor& var, const Tensor& value) {
    UpdateLock lock(var);
    T* v = var.data<T>();
    const T* d = value.data<T>();
    const int64_t n = var.NumElements();
    for (int64_t i = 0; i < n; ++i) v[i] += d[i];
  }
};

}  // namespace

WEFT_REGISTER_KERNEL("Assign", "CPU", AssignOp);
WEFT_REGISTER_KERNEL("AssignAdd", "CPU", AssignAddOp);

}  // namespace cpu
}  // namespace weft
