// GPU kernel for CollectiveAllReduce (graph/ops/collective_ops.cc).
//
// With NCCL: the inputs are reduced into the outputs by ncclAllReduce on the
// device's compute stream (sum, or NCCL's average for `mean`), one NCCL group
// call per fused bucket, and the kernel completes at once: later kernels on
// the stream see the result. A one-rank group needs no setup from outside; a
// group across tasks needs the group's NCCL unique id in the node's
// `nccl_unique_id` attribute (see nccl_communicators.h).
//
// Without an id for a group across tasks, the tensors take the CPU path: they
// are copied to the host, all-reduced by the task's CollectiveRuntime (the
// gRPC ring) and copied back, so a GPU job still runs where NCCL cannot.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "runtime/gpu/gpu_device.h"
#include "runtime/gpu/nccl_communicators.h"
#include "runtime/op_kernel.h"

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

class GpuCollectiveAllReduceOp : public AsyncOpKernel {
 public:
  explicit GpuCollectiveAllReduceOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    if (!GetAttr(c, GetIntAttr(c->def(), "group_size"), &group_size_)) return;
    if (!GetAttr(c, GetIntAttr(c->def(), "group_key"), &args_.group_key)) return;
    if (!GetAttr(c, GetIntAttr(c->def(), "instance_key"), &args_.instance_key)) return;
    if (!GetAttr(c, GetBoolAttrOr(c->def(), "mean", false), &mean_)) return;
    if (!GetAttr(c, GetStringAttrOr(c->def(), "nccl_unique_id", ""), &nccl_id_)) return;
    std::string tasks;
    if (!GetAttr(c, GetStringAttrOr(c->def(), "group_tasks", ""), &tasks)) return;
    if (!tasks.empty()) args_.tasks = absl::StrSplit(tasks, ',');
    if (group_size_ > 1 && static_cast<int64_t>(args_.tasks.size()) != group_size_) {
      c->SetStatus(absl::InvalidArgumentError(absl::StrCat("group_tasks names ", args_.tasks.size(),
                                                           " task(s) for group_size ", group_size_)));
      return;
    }
    // This task's rank: its place in group_tasks (the device name starts
    // with the task, "/job:worker/task:1/device:GPU:0").
    const std::string& device = c->device()->name();
    for (size_t r = 0; r < args_.tasks.size(); ++r) {
      if (absl::StartsWith(device, args_.tasks[r] + "/")) rank_ = static_cast<int>(r);
    }
    if (group_size_ > 1 && !nccl_id_.empty() && rank_ < 0) {
      c->SetStatus(absl::InvalidArgumentError(
          absl::StrCat("device ", device, " is in none of group_tasks ", tasks)));
    }
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    GpuDevice* gpu = static_cast<GpuDevice*>(ctx->device());
    if (group_size_ == 1 || !nccl_id_.empty()) {
      absl::MutexLock lock(gpu->compute_mutex());  // the stream's order is the kernels' order
      ctx->SetStatus(AllReduceWithNccl(ctx, gpu));
      return done();
    }
    AllReduceOnHost(ctx, gpu, std::move(done));
  }

 private:
  absl::Status AllReduceWithNccl(OpKernelContext* ctx, GpuDevice* gpu) {
    const int rank = group_size_ == 1 ? 0 : rank_;
    ASSIGN_OR_RETURN(ncclComm_t comm,
                     GetNcclCommunicator(gpu, args_.group_key, rank, static_cast<int>(group_size_), nccl_id_));
    std::vector<Tensor*> outs;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& in = ctx->input(i);
      Tensor* out = ctx->allocate_output(i, in.dtype(), in.shape());
      if (out == nullptr) return ctx->status();
      outs.push_back(out);
    }
    WEFT_NCCL_RETURN_IF_ERROR(ncclGroupStart());
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const ncclResult_t r = ncclAllReduce(ctx->input(i).raw_data(), outs[i]->raw_data(),
                                           static_cast<size_t>(ctx->input(i).NumElements()), ncclFloat32,
                                           mean_ ? ncclAvg : ncclSum, comm, gpu->stream());
      if (r != ncclSuccess) {
        ncclGroupEnd();
        return NcclStatus(r, "ncclAllReduce");
      }
    }
    WEFT_NCCL_RETURN_IF_ERROR(ncclGroupEnd());
    return absl::OkStatus();
  }

  // The gRPC ring on host copies, for a group without an NCCL id.
  void AllReduceOnHost(OpKernelContext* ctx, GpuDevice* gpu, DoneCallback done) {
    if (ctx->collectives() == nullptr) {
      ctx->SetStatus(absl::FailedPreconditionError("an all-reduce across tasks runs only on a worker"));
      return done();
    }
    auto hosts = std::make_shared<std::vector<Tensor>>();
    std::vector<Tensor*> ptrs;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      absl::StatusOr<Tensor> h = gpu->CopyToHost(ctx->input(i));
      if (!h.ok()) {
        ctx->SetStatus(h.status());
        return done();
      }
      hosts->push_back(*std::move(h));
    }
    for (Tensor& t : *hosts) ptrs.push_back(&t);
    CollectiveRuntime::AllReduceArgs args = args_;
    args.step_id = ctx->step_id();
    const float scale = mean_ ? 1.0f / static_cast<float>(group_size_) : 1.0f;
    ctx->collectives()->AllReduceAsync(args, ptrs, [ctx, gpu, hosts, scale, done](const absl::Status& s) {
      if (!s.ok()) {
        ctx->SetStatus(s);
        return done();
      }
      for (size_t i = 0; i < hosts->size(); ++i) {
        Tensor& h = (*hosts)[i];
        if (scale != 1.0f) {
          for (float& v : h.flat<float>()) v *= scale;
        }
        absl::StatusOr<Tensor> d = gpu->CopyFromHost(h);
        if (!d.ok()) {
          ctx->SetStatus(d.status());
          break;
        }
        ctx->set_output(static_cast<int>(i), *std::move(d));
      }
      done();
    });
  }

  int64_t group_size_ = 1;
  bool mean_ = false;
  std::string nccl_id_;
  int rank_ = -1;
  CollectiveRuntime::AllReduceArgs args_;
};

WEFT_REGISTER_KERNEL("CollectiveAllReduce", "GPU", GpuCollectiveAllReduceOp);

}  // namespace
}  // namespace gpu
}  // namespace weft
