// CPU kernel for CollectiveAllReduce (graph/ops/collective_ops.cc): copies its
// inputs into its outputs, all-reduces the outputs as one fused collective
// through the task's CollectiveRuntime, and scales them by 1/group_size when
// the op asks for the mean. It is asynchronous: waiting for peers holds no
// thread.
//
// With wire_dtype "float16" (MixedPrecision.float16_all_reduce) the inputs
// are rounded into float16 copies, which travel and are summed (in float32,
// rounded back at each hop: worker/collective/reduce.cc), and the outputs
// are the sums widened back to float32: half the bytes on the wire.
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/float16_convert.h"
#include "graph/device_name.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

class CollectiveAllReduceOp : public AsyncOpKernel {
 public:
  explicit CollectiveAllReduceOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    if (!GetAttr(c, GetIntAttr(c->def(), "group_size"), &group_size_)) return;
    if (!GetAttr(c, GetIntAttr(c->def(), "group_key"), &args_.group_key)) return;
    if (!GetAttr(c, GetIntAttr(c->def(), "instance_key"), &args_.instance_key)) return;
    if (!GetAttr(c, GetBoolAttrOr(c->def(), "mean", false), &mean_)) return;
    std::string wire;
    if (!GetAttr(c, GetStringAttrOr(c->def(), "wire_dtype", "float32"), &wire)) return;
    half_ = wire == "float16";
    std::string devices;
    if (!GetAttr(c, GetStringAttrOr(c->def(), "group_devices", ""), &devices)) return;
    if (!devices.empty()) {
      c->SetStatus(absl::UnimplementedError(absl::StrCat(
          "an all-reduce across the devices of one task (group_devices ", devices,
          ") runs on GPUs through NCCL; CPU replicas of one task are averaged in process instead")));
      return;
    }
    std::string tasks;
    if (!GetAttr(c, GetStringAttrOr(c->def(), "group_tasks", ""), &tasks)) return;
    if (!GetAttr(c, ParseGroupTasks(tasks, group_size_), &args_.tasks)) return;
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    if (half_ && group_size_ > 1 && ctx->collectives() != nullptr) return ComputeHalf(ctx, std::move(done));
    std::vector<Tensor*> outs;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& in = ctx->input(i);
      Tensor* out = ctx->allocate_output(i, in.dtype(), in.shape());
      if (out == nullptr) return done();
      if (in.TotalBytes() > 0) std::memcpy(out->raw_data(), in.raw_data(), in.TotalBytes());
      outs.push_back(out);
    }
    if (group_size_ == 1) return done();
    if (ctx->collectives() == nullptr) {
      ctx->SetStatus(absl::FailedPreconditionError("an all-reduce across tasks runs only on a worker"));
      return done();
    }
    CollectiveRuntime::AllReduceArgs args = args_;
    args.step_id = ctx->step_id();
    const float scale = mean_ ? 1.0f / static_cast<float>(group_size_) : 1.0f;
    ctx->collectives()->AllReduceAsync(args, outs, [ctx, outs, scale, done](const absl::Status& s) {
      if (!s.ok()) {
        ctx->SetStatus(s);
      } else if (scale != 1.0f) {
        for (Tensor* t : outs) {
          for (float& v : t->flat<float>()) v *= scale;
        }
      }
      done();
    });
  }

 private:
  // The float16 wire: float16 copies of the inputs are all-reduced, then
  // widened (and scaled for the mean) into the outputs.
  void ComputeHalf(OpKernelContext* ctx, DoneCallback done) {
    auto halves = std::make_shared<std::vector<Tensor>>();
    std::vector<Tensor*> outs, wire;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& in = ctx->input(i);
      if (in.dtype() != DType::kFloat32) {
        ctx->SetStatus(absl::InvalidArgumentError(
            absl::StrCat("input ", i, " is ", DTypeName(in.dtype()), "; a float16 all-reduce takes float32")));
        return done();
      }
      Tensor* out = ctx->allocate_output(i, DType::kFloat32, in.shape());
      if (out == nullptr) return done();
      absl::StatusOr<Tensor> half = ctx->allocate_temp(DType::kFloat16, in.shape());
      if (!half.ok()) {
        ctx->SetStatus(half.status());
        return done();
      }
      FloatToHalf(in.data<float>(), half->data<Half>(), in.NumElements());
      halves->push_back(*std::move(half));
      outs.push_back(out);
    }
    for (Tensor& h : *halves) wire.push_back(&h);
    CollectiveRuntime::AllReduceArgs args = args_;
    args.step_id = ctx->step_id();
    const float scale = mean_ ? 1.0f / static_cast<float>(group_size_) : 1.0f;
    ctx->collectives()->AllReduceAsync(args, wire, [ctx, outs, halves, scale, done](const absl::Status& s) {
      if (!s.ok()) {
        ctx->SetStatus(s);
      } else {
        for (size_t i = 0; i < outs.size(); ++i) {
          HalfToFloat((*halves)[i].data<Half>(), scale, outs[i]->data<float>(), outs[i]->NumElements());
        }
      }
      done();
    });
  }

  int64_t group_size_ = 1;
  bool half_ = false;
  bool mean_ = false;
  CollectiveRuntime::AllReduceArgs args_;
};

}  // namespace

WEFT_REGISTER_KERNEL("CollectiveAllReduce", "CPU", CollectiveAllReduceOp);

}  // namespace cpu
}  // namespace weft
