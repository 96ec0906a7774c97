// GPU kernels for Const, Variable, Cast, ConcatRows and SliceRows. (Identity,
// NoOp, Reshape and ReshapeLike never read a payload, so the CPU's kernels are
// registered for GPUs too, beside them.)
//
// A Variable's value lives in device memory, in the ResourceMgr the step
// uses (or its container's store), under the CPU's name rules (shared_name). Its initial value is
// computed on the host by the CPU Variable kernel for the same node (same
// initializer, seed, init_name, init_shape and row_offset, so the same
// values) and copied to the device once, when the variable is created.
// Const copies its value to the device when the kernel is built.
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "runtime/device.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/kernels/shard_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {
namespace {

using kernels::GetAttr;

// A host tensor copied to a new device tensor (blocking).
absl::StatusOr<Tensor> CopyToDevice(gpu::GpuDevice* gpu, const Tensor& host) {
  absl::StatusOr<Tensor> dev = Tensor::Allocate(host.dtype(), host.shape(), gpu->allocator());
  if (!dev.ok()) return dev.status();
  if (host.TotalBytes() > 0) {
    absl::Status s = gpu->CopyHostToDevice(host.raw_data(), dev->raw_data(), host.TotalBytes());
    if (!s.ok()) return s;
  }
  return dev;
}

class ConstOp : public OpKernel {
 public:
  explicit ConstOp(OpKernelConstruction* c) : OpKernel(c) {
    auto t = GetTensorAttr(c->def(), "value");
    if (!t.ok()) {
      c->SetStatus(t.status());
      return;
    }
    auto dev = CopyToDevice(Gpu(c), *t);
    if (!dev.ok()) {
      c->SetStatus(dev.status());
      return;
    }
    value_ = *std::move(dev);
  }
  void Compute(OpKernelContext* ctx) override { ctx->set_output(0, value_); }

 private:
  Tensor value_;
};

// Serialises the creation of GPU variables, so two nodes sharing a name
// create it once. Lookups of existing variables do not take it.
absl::Mutex& VariableCreationMutex() {
  static absl::Mutex* mu = new absl::Mutex();
  return *mu;
}

class VariableOp : public OpKernel {
 public:
  explicit VariableOp(OpKernelConstruction* c) : OpKernel(c) {
    if (!GetAttr(c, GetTypeAttr(c->def(), "dtype"), &dtype_)) return;
    if (!GetAttr(c, GetShapeAttr(c->def(), "shape"), &shape_)) return;
    std::string shared;
    if (!GetAttr(c, GetStringAttrOr(c->def(), "shared_name", ""), &shared)) return;
    resource_name_ = shared.empty() ? c->def().name() : shared;
    // As on the CPU: a container's variable lives in the task's store of it.
    std::string container;
    if (!GetAttr(c, GetStringAttrOr(c->def(), "container", ""), &container)) return;
    if (!container.empty()) {
      absl::StatusOr<ResourceMgr*> store = c->container(container);
      if (!store.ok()) {
        c->SetStatus(store.status());
        return;
      }
      container_store_ = *store;
    }
    // The CPU kernel validates the remaining attributes now, as on the CPU.
    auto host_kernel = KernelRegistry::Global()->Create(&c->node(), HostDevice());
    if (!host_kernel.ok()) {
      c->SetStatus(host_kernel.status());
      return;
    }
    host_kernel_ = *std::move(host_kernel);
  }

  void Compute(OpKernelContext* ctx) override {
    ResourceMgr* rm = container_store_ != nullptr ? container_store_ : ctx->resources();
    absl::StatusOr<Tensor> var = rm->LookupVariable(resource_name_);
    if (!var.ok()) {
      absl::MutexLock lock(&VariableCreationMutex());
      var = rm->LookupVariable(resource_name_);
      if (!var.ok()) {
        var = Create(ctx);
        OP_REQUIRES_OK(ctx, var.status());
        rm->SetVariable(resource_name_, *var);
      }
    }
    OP_REQUIRES(ctx, var->dtype() == dtype_ && var->shape() == shape_,
                absl::FailedPreconditionError(absl::StrCat(
                    "variable '", resource_name_, "' exists as ", DTypeName(var->dtype()), var->shape().DebugString(),
                    " but the graph declares ", DTypeName(dtype_), shape_.DebugString())));
    ctx->set_output(0, *std::move(var));
  }

 private:
  static Device* HostDevice() {
    static CpuDevice* device = new CpuDevice("/device:CPU:0", 1);
    return device;
  }

  // The initial value: the CPU kernel's, computed in a private ResourceMgr,
  // then copied to the device.
  absl::StatusOr<Tensor> Create(OpKernelContext* ctx) {
    ResourceMgr scratch;
    std::vector<Tensor> outputs(1);
    OpKernelContext::Params p;
    p.node = &node();
    p.device = HostDevice();
    p.step_id = ctx->step_id();
    p.resources = &scratch;
    p.outputs = absl::MakeSpan(outputs);
    OpKernelContext host_ctx(p);
    host_kernel_->Compute(&host_ctx);
    if (!host_ctx.status().ok()) return host_ctx.status();
    return CopyToDevice(Gpu(ctx), outputs[0]);
  }

  DType dtype_ = DType::kFloat32;
  TensorShape shape_;
  std::string resource_name_;
  ResourceMgr* container_store_ = nullptr;  // the container's (outlives the kernel), or the context's
  std::unique_ptr<OpKernel> host_kernel_;
};

class CastOp : public OpKernel {
 public:
  explicit CastOp(OpKernelConstruction* c) : OpKernel(c) { GetAttr(c, GetTypeAttr(c->def(), "dtype"), &to_); }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    if (x.dtype() == to_) {
      ctx->set_output(0, x);
      return;
    }
    const ElemType from = static_cast<ElemType>(x.dtype()), to = static_cast<ElemType>(to_);
    OP_REQUIRES(ctx, CastSupported(from, to),
                absl::InvalidArgumentError(
                    absl::StrCat("cannot cast ", DTypeName(x.dtype()), " to ", DTypeName(to_))));
    Tensor* y = ctx->allocate_output(0, to_, x.shape());
    if (y == nullptr) return;
    OP_REQUIRES_CUDA(ctx, LaunchCast(from, to, x.raw_data(), y->raw_data(), x.NumElements(), Stream(ctx)),
                     "Cast kernel");
  }

 private:
  DType to_ = DType::kFloat32;
};

// Row ranges of row-major tensors: one device-to-device copy per shard.
struct ConcatRows {
  static void Run(OpKernelContext* ctx, Tensor* out) {
    char* dst = static_cast<char*>(out->raw_data());
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& s = ctx->input(i);
      if (s.TotalBytes() > 0) {
        OP_REQUIRES_CUDA(ctx,
                         cudaMemcpyAsync(dst, s.raw_data(), s.TotalBytes(), cudaMemcpyDeviceToDevice, Stream(ctx)),
                         "cudaMemcpyAsync (ConcatRows)");
      }
      dst += s.TotalBytes();
    }
  }
};

struct SliceRows {
  static void Run(OpKernelContext* ctx, const char* src, Tensor* out) {
    OP_REQUIRES_CUDA(ctx,
                     cudaMemcpyAsync(out->raw_data(), src, out->TotalBytes(), cudaMemcpyDeviceToDevice, Stream(ctx)),
                     "cudaMemcpyAsync (SliceRows)");
  }
};

WEFT_REGISTER_KERNEL("Const", "GPU", ConstOp);
WEFT_REGISTER_KERNEL("Variable", "GPU", VariableOp);
WEFT_REGISTER_KERNEL("Cast", "GPU", CastOp);
WEFT_REGISTER_KERNEL("ConcatRows", "GPU", kernels::ConcatRowsKernel<ConcatRows>);
WEFT_REGISTER_KERNEL("SliceRows", "GPU", kernels::SliceRowsKernel<SliceRows>);
WEFT_REGISTER_KERNEL("MicroBatch", "GPU", kernels::MicroBatchKernel<SliceRows>);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
