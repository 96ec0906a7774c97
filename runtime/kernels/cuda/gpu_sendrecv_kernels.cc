// GPU kernels for _Send and _Recv: how a tensor leaves and enters a GPU.
//
// The rendezvous only ever holds host tensors, so every consumer of a value
// — a CPU partition of this task, or a peer task's RecvTensor, which sends
// straight out of the buffer — reads it the same way. _Send on a GPU
// enqueues a device->pinned-host copy after the kernels enqueued so far and
// completes from the device's completion thread once the copy is there,
// holding no thread and not the device's compute lock meanwhile. _Recv on a
// GPU takes the host value, enqueues a pinned-host->device copy ordered
// before every later kernel on the device's stream, and completes at once:
// the stream, not the host, waits for the copy.
#include <string>

#include "absl/strings/str_cat.h"
#include "graph/attr.h"
#include "graph/partition.h"
#include "runtime/gpu/gpu_device.h"
#include "runtime/op_kernel.h"
#include "runtime/rendezvous.h"

namespace weft {
namespace gpu {
namespace {

template <typename T>
bool GetAttr(OpKernelConstruction* c, absl::StatusOr<T> v, T* out) {
  if (!v.ok()) {
    c->SetStatus(v.status());
    return false;
  }
  *out = *std::move(v);
  return true;
}

// The step-independent part of the rendezvous key.
struct KeyPrefix {
  std::string send_device;
  int64_t incarnation = 0;
  std::string recv_device;
  std::string tensor_name;

  bool Init(OpKernelConstruction* c) {
    return GetAttr(c, GetStringAttr(c->def(), "send_device"), &send_device) &&
           GetAttr(c, GetIntAttrOr(c->def(), "send_device_incarnation", 0), &incarnation) &&
           GetAttr(c, GetStringAttr(c->def(), "recv_device"), &recv_device) &&
           GetAttr(c, GetStringAttr(c->def(), "tensor_name"), &tensor_name);
  }
  std::string Key(int64_t step_id) const {
    return RendezvousKey(send_device, incarnation, recv_device, tensor_name, step_id);
  }
};

absl::Status NoRendezvous(const OpKernelContext& ctx) {
  return absl::FailedPreconditionError(
      absl::StrCat(ctx.node().op(), " needs a step rendezvous: run partitions through a worker or the trainer"));
}

class GpuSendOp : public AsyncOpKernel {
 public:
  explicit GpuSendOp(OpKernelConstruction* c) : AsyncOpKernel(c) { key_.Init(c); }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    if (ctx->rendezvous() == nullptr) {
      ctx->SetStatus(NoRendezvous(*ctx));
      return done();
    }
    const Tensor& value = ctx->input(0);
    if (value.on_host()) {  // a host-memory input (none today): no copy needed
      ctx->SetStatus(ctx->rendezvous()->Send(key_.Key(ctx->step_id()), value, /*is_dead=*/false));
      return done();
    }
    GpuDevice* gpu = static_cast<GpuDevice*>(ctx->device());
    // The kernel outlives the step and the context outlives `done`.
    gpu->CopyToHostAsync(value, [this, ctx, done = std::move(done)](absl::Status s, Tensor host) {
      if (s.ok()) s = ctx->rendezvous()->Send(key_.Key(ctx->step_id()), host, /*is_dead=*/false);
      if (!s.ok()) ctx->SetStatus(s);
      done();
    });
  }

 private:
  KeyPrefix key_;
};

class GpuRecvOp : public AsyncOpKernel {
 public:
  explicit GpuRecvOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    if (!key_.Init(c)) return;
    if (!GetAttr(c, GetTypeAttr(c->def(), "tensor_type"), &dtype_)) return;
    GetAttr(c, GetShapeAttr(c->def(), "shape"), &shape_);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    if (ctx->rendezvous() == nullptr) {
      ctx->SetStatus(NoRendezvous(*ctx));
      return done();
    }
    ctx->rendezvous()->RecvAsync(
        key_.Key(ctx->step_id()),
        [this, ctx, done = std::move(done)](const absl::Status& s, const Tensor& value, bool is_dead) {
          Deliver(ctx, s, value, is_dead);
          done();
        });
  }

 private:
  void Deliver(OpKernelContext* ctx, const absl::Status& s, const Tensor& value, bool is_dead) const {
    OP_REQUIRES_OK(ctx, s);
    OP_REQUIRES(ctx, !is_dead,
                absl::UnimplementedError(absl::StrCat("received a dead tensor for '", key_.tensor_name, "'")));
    OP_REQUIRES(ctx, value.dtype() == dtype_ && shape_.IsCompatibleWith(value.shape()),
                absl::InvalidArgumentError(absl::StrCat(
                    "received ", DTypeName(value.dtype()), value.shape().DebugString(), " for '", key_.tensor_name,
                    "' from ", key_.send_device, ", expected ", DTypeName(dtype_), shape_.DebugString())));
    absl::StatusOr<Tensor> dev = ctx->device()->CopyFromHost(value);
    OP_REQUIRES_OK(ctx, dev.status());
    ctx->set_output(0, *std::move(dev));
  }

  KeyPrefix key_;
  DType dtype_ = DType::kInvalid;
  TensorShape shape_;
};

WEFT_REGISTER_KERNEL("_Send", "GPU", GpuSendOp);
WEFT_REGISTER_KERNEL("_Recv", "GPU", GpuRecvOp);

}  // namespace
}  // namespace gpu
}  // namespace weft
