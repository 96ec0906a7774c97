// CPU kernel for CollectiveAllReduce (graph/ops/collective_ops.cc): copies its
// inputs into its outputs, all-reduces the outputs as one fused collective
// through the task's CollectiveRuntime, and scales them by 1/group_size when
// the op asks for the mean. It is asynchronous: waiting for peers holds no
// thread.
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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
  int64_t group_size_ = 1;
  bool mean_ = false;
  CollectiveRuntime::AllReduceArgs args_;
};

}  // namespace

WEFT_REGISTER_KERNEL("CollectiveAllReduce", "CPU", CollectiveAllReduceOp);

}  // namespace cpu
}  // namespace weft
