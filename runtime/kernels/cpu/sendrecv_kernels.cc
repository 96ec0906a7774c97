// CPU kernels for _Send and _Recv (graph/ops/sendrecv_ops.cc): the two ends
// of an edge cut by partitioning, meeting in the step's rendezvous
// (OpKernelContext::rendezvous(), which the worker passes to Executor::Run).
//
// _Recv is an AsyncOpKernel: it registers its interest with the rendezvous
// and returns; the rendezvous completes it from whichever thread delivers the
// value (the _Send's, or the RPC thread that pulled it from a peer). No thread
// waits, so a partition that sends to a peer and receives the answer (x ->
// task B -> back) runs even inline or on a one-thread pool. An abort
// completes every pending _Recv with the abort's status, which becomes the
// node's error. Run by a caller without async support, _Recv blocks in
// Compute instead (AsyncOpKernel's fallback), which deadlocks on such a round
// trip; the worker never does that.
//
// _Send does not copy: the receiver gets the same buffer (in process) or the
// RecvTensor RPC sends straight out of it. A later in-place update of that
// buffer in the same step (an Apply op on a variable that was sent) is
// ordered after the receiver's use only by the graph, as in TensorFlow.
#include <string>

#include "absl/strings/str_cat.h"
#include "graph/partition.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/op_kernel.h"
#include "runtime/rendezvous.h"

namespace weft {
namespace {

// The step-independent part of the key, read from the node's attributes.
struct KeyPrefix {
  std::string send_device;
  int64_t incarnation = 0;
  std::string recv_device;
  std::string tensor_name;

  bool Init(OpKernelConstruction* c) {
    return cpu::GetAttr(c, GetStringAttr(c->def(), "send_device"), &send_device) &&
           cpu::GetAttr(c, GetIntAttrOr(c->def(), "send_device_incarnation", 0), &incarnation) &&
           cpu::GetAttr(c, GetStringAttr(c->def(), "recv_device"), &recv_device) &&
           cpu::GetAttr(c, GetStringAttr(c->def(), "tensor_name"), &tensor_name);
  }
  std::string Key(int64_t step_id) const {
    return RendezvousKey(send_device, incarnation, recv_device, tensor_name, step_id);
  }
};

absl::Status NoRendezvous(const OpKernelContext& ctx) {
  return absl::FailedPreconditionError(absl::StrCat(
      ctx.node().op(), " needs a step rendezvous: run partitions through a worker, not RunGraphOnce"));
}

class SendOp : public OpKernel {
 public:
  explicit SendOp(OpKernelConstruction* c) : OpKernel(c) { key_.Init(c); }

  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES(ctx, ctx->rendezvous() != nullptr, NoRendezvous(*ctx));
    OP_REQUIRES_OK(ctx, ctx->rendezvous()->Send(key_.Key(ctx->step_id()), ctx->input(0), /*is_dead=*/false));
  }

 private:
  KeyPrefix key_;
};

class RecvOp : public AsyncOpKernel {
 public:
  explicit RecvOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    if (!key_.Init(c)) return;
    if (!cpu::GetAttr(c, GetTypeAttr(c->def(), "tensor_type"), &dtype_)) return;
    cpu::GetAttr(c, GetShapeAttr(c->def(), "shape"), &shape_);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    if (ctx->rendezvous() == nullptr) {
      ctx->SetStatus(NoRendezvous(*ctx));
      return done();
    }
    // The kernel outlives the step and the context outlives `done`.
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
    // weft has no control flow, so nothing legitimately sends a dead tensor.
    OP_REQUIRES(ctx, !is_dead,
                absl::UnimplementedError(absl::StrCat("received a dead tensor for '", key_.tensor_name, "'")));
    OP_REQUIRES(ctx, value.dtype() == dtype_ && shape_.IsCompatibleWith(value.shape()),
                absl::InvalidArgumentError(absl::StrCat(
                    "received ", DTypeName(value.dtype()), value.shape().DebugString(), " for '", key_.tensor_name,
                    "' from ", key_.send_device, ", expected ", DTypeName(dtype_), shape_.DebugString())));
    ctx->set_output(0, value);
  }

  KeyPrefix key_;
  DType dtype_ = DType::kInvalid;
  TensorShape shape_;
};

WEFT_REGISTER_KERNEL("_Send", "CPU", SendOp);
WEFT_REGISTER_KERNEL("_Recv", "CPU", RecvOp);

}  // namespace
}  // namespace weft
