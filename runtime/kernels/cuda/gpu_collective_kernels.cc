// GPU kernel for CollectiveAllReduce (graph/ops/collective_ops.cc).
//
// With NCCL: the inputs are reduced into the outputs by ncclAllReduce on the
// device's compute stream (sum, or NCCL's average for `mean`), one NCCL group
// call per fused bucket, and the kernel completes at once: later kernels on
// the stream see the result. A one-rank group needs no setup from outside; a
// group across tasks needs the group's NCCL unique id in the node's
// `nccl_unique_id` attribute (see nccl_communicators.h).
//
// A group over several GPUs of this task (MIRRORED: attr `group_devices`, the
// ranks' devices in rank order) is one NCCL communicator per GPU, made
// together, and its ranks' ncclAllReduce calls must be issued together: each
// rank's kernel joins an in-process gather (runtime/local_gather.h) with its
// buffers and returns; the last to arrive issues every rank's reduction in one
// NCCL group, each on its own GPU's compute stream, and completes them all.
// A rank waiting for the others holds no thread. If the step aborts first
// (another replica failed), the step's rendezvous abort reaches the waiting
// ranks and fails them, so a failed replica never leaves the others hanging.
//
// Without an id for a group across tasks, the tensors take the CPU path: they
// are copied to the host, all-reduced by the task's CollectiveRuntime (the
// gRPC ring) and copied back, so a GPU job still runs where NCCL cannot.
//
// With wire_dtype "float16" (MixedPrecision.float16_all_reduce) a group
// across tasks carries float16: NCCL reduces float16 copies of the inputs
// (ncclHalf), or the host path rounds its copies as the CPU kernel does, so
// GPU and CPU ranks of one group agree on the wire; the sums are widened
// back into float32 outputs. An in-process group (group_devices) refuses it.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/float16_convert.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/partition.h"
#include "runtime/gpu/gpu_device.h"
#include "runtime/gpu/nccl_communicators.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/local_gather.h"
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

// One rank of an in-process group: its GPU and buffers. The tensors keep the
// buffers alive until the reduction is enqueued (the allocator is
// stream-ordered, so releasing them after that is safe).
struct LocalRank {
  GpuDevice* gpu = nullptr;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
};

using RankGather = LocalGather<LocalRank>;

RankGather& Gather() {
  static RankGather* const g = new RankGather();
  return *g;
}

// Issues every rank's reductions in one NCCL group.
absl::Status LaunchLocalGroup(std::vector<LocalRank>& ranks, int64_t group_key, bool mean) {
  std::vector<GpuDevice*> gpus;
  for (const LocalRank& r : ranks) gpus.push_back(r.gpu);
  ASSIGN_OR_RETURN(std::vector<ncclComm_t> comms, GetLocalNcclCommunicators(gpus, group_key));
  const size_t n = ranks[0].inputs.size();
  for (const LocalRank& r : ranks) {
    if (r.inputs.size() != n) {
      return absl::InvalidArgumentError(absl::StrCat("in-process all-reduce group ", group_key, ": ",
                                                     r.gpu->name(), " brings ", r.inputs.size(),
                                                     " tensors, rank 0 brings ", n));
    }
    for (size_t i = 0; i < n; ++i) {
      if (r.inputs[i].shape() != ranks[0].inputs[i].shape()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "in-process all-reduce group ", group_key, ": tensor ", i, " is ", r.inputs[i].shape().DebugString(),
            " on ", r.gpu->name(), " but ", ranks[0].inputs[i].shape().DebugString(), " on ", ranks[0].gpu->name()));
      }
    }
  }
  WEFT_NCCL_RETURN_IF_ERROR(ncclGroupStart());
  for (size_t k = 0; k < ranks.size(); ++k) {
    for (size_t i = 0; i < n; ++i) {
      const ncclResult_t res = ncclAllReduce(ranks[k].inputs[i].raw_data(), ranks[k].outputs[i].raw_data(),
                                             static_cast<size_t>(ranks[k].inputs[i].NumElements()), ncclFloat32,
                                             mean ? ncclAvg : ncclSum, comms[k], ranks[k].gpu->stream());
      if (res != ncclSuccess) {
        ncclGroupEnd();
        return NcclStatus(res, "ncclAllReduce");
      }
    }
  }
  WEFT_NCCL_RETURN_IF_ERROR(ncclGroupEnd());
  return absl::OkStatus();
}

// The same, leaving the calling thread's current CUDA device as it found it
// (NCCL switches devices per rank; the thread may be a GPU executor's).
absl::Status LaunchLocalGroupOnAnyThread(std::vector<LocalRank>& ranks, int64_t group_key, bool mean) {
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  const absl::Status s = LaunchLocalGroup(ranks, group_key, mean);
  if (previous >= 0) cudaSetDevice(previous);
  return s;
}

class GpuCollectiveAllReduceOp : public AsyncOpKernel {
 public:
  explicit GpuCollectiveAllReduceOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    if (!GetAttr(c, GetIntAttr(c->def(), "group_size"), &group_size_)) return;
    if (!GetAttr(c, GetIntAttr(c->def(), "group_key"), &args_.group_key)) return;
    if (!GetAttr(c, GetIntAttr(c->def(), "instance_key"), &args_.instance_key)) return;
    if (!GetAttr(c, GetBoolAttrOr(c->def(), "mean", false), &mean_)) return;
    std::string wire;
    if (!GetAttr(c, GetStringAttrOr(c->def(), "wire_dtype", "float32"), &wire)) return;
    half_ = wire == "float16";
    if (!GetAttr(c, GetStringAttrOr(c->def(), "nccl_unique_id", ""), &nccl_id_)) return;
    const std::string& device = c->device()->name();
    // An in-process group (group_devices) names no tasks: it is read first.
    std::string devices;
    if (!GetAttr(c, GetStringAttrOr(c->def(), "group_devices", ""), &devices)) return;
    if (!devices.empty() && half_) {
      c->SetStatus(absl::UnimplementedError(absl::StrCat(
          "a float16 all-reduce is for groups across tasks; the GPUs of one task (group_devices ", devices,
          ") all-reduce float32")));
      return;
    }
    if (!devices.empty()) {
      const std::vector<std::string> names = absl::StrSplit(devices, ',');
      if (static_cast<int64_t>(names.size()) != group_size_) {
        c->SetStatus(absl::InvalidArgumentError(absl::StrCat("group_devices names ", names.size(),
                                                             " device(s) for group_size ", group_size_)));
        return;
      }
      for (size_t r = 0; r < names.size(); ++r) {
        if (names[r] == device) local_rank_ = static_cast<int>(r);
      }
      if (local_rank_ < 0) {
        c->SetStatus(absl::InvalidArgumentError(
            absl::StrCat("device ", device, " is in none of group_devices ", devices)));
      }
      return;
    }
    std::string tasks;
    if (!GetAttr(c, GetStringAttrOr(c->def(), "group_tasks", ""), &tasks)) return;
    if (!GetAttr(c, ParseGroupTasks(tasks, group_size_), &args_.tasks)) return;
    // This task's rank: its place in group_tasks (the device name starts
    // with the task, "/job:worker/task:1/device:GPU:0").
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
    if (local_rank_ >= 0) return AllReduceInProcess(ctx, gpu, std::move(done));
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
    // The float16 wire: each input rounded into a float16 buffer, which NCCL
    // reduces in place; the sums are widened into the outputs. Conversions
    // stay outside the NCCL group, whose operations are enqueued at its end.
    std::vector<Tensor> wire;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& in = ctx->input(i);
      Tensor* out = ctx->allocate_output(i, in.dtype(), in.shape());
      if (out == nullptr) return ctx->status();
      outs.push_back(out);
      if (!half_) continue;
      if (in.dtype() != DType::kFloat32) {
        return absl::InvalidArgumentError(
            absl::StrCat("input ", i, " is ", DTypeName(in.dtype()), "; a float16 all-reduce takes float32"));
      }
      ASSIGN_OR_RETURN(Tensor h, ctx->allocate_temp(DType::kFloat16, in.shape()));
      WEFT_CUDA_RETURN_IF_ERROR(gpu_kernels::LaunchToHalfPair(in.data<float>(), h.raw_data(), in.NumElements(),
                                                              nullptr, nullptr, 0, /*bfloat16=*/false,
                                                              gpu->stream()));
      wire.push_back(std::move(h));
    }
    WEFT_NCCL_RETURN_IF_ERROR(ncclGroupStart());
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const void* send = half_ ? wire[i].raw_data() : ctx->input(i).raw_data();
      void* recv = half_ ? wire[i].raw_data() : outs[i]->raw_data();
      const ncclResult_t r =
          ncclAllReduce(send, recv, static_cast<size_t>(ctx->input(i).NumElements()), half_ ? ncclHalf : ncclFloat32,
                        mean_ ? ncclAvg : ncclSum, comm, gpu->stream());
      if (r != ncclSuccess) {
        ncclGroupEnd();
        return NcclStatus(r, "ncclAllReduce");
      }
    }
    WEFT_NCCL_RETURN_IF_ERROR(ncclGroupEnd());
    for (size_t i = 0; i < wire.size(); ++i) {
      WEFT_CUDA_RETURN_IF_ERROR(gpu_kernels::LaunchFloat16ToFloat(wire[i].raw_data(), outs[i]->data<float>(),
                                                                  outs[i]->NumElements(), gpu->stream()));
    }
    return absl::OkStatus();
  }

  // Joins the in-process group (see the file comment). The abort watch is a
  // receive on the step's rendezvous for a key nobody sends: it runs only
  // when the step aborts (or, harmlessly, when the step's rendezvous is
  // cleaned up after the step). `watch->mu` orders it against the join: an
  // abort before the join fails this rank at once; one after it fails the
  // ranks still waiting. Nothing here touches `ctx` after joining, since
  // another rank may complete this one at any moment from then on.
  void AllReduceInProcess(OpKernelContext* ctx, GpuDevice* gpu, DoneCallback done) {
    LocalRank me;
    me.gpu = gpu;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& in = ctx->input(i);
      Tensor* out = ctx->allocate_output(i, in.dtype(), in.shape());
      if (out == nullptr) return done();
      me.inputs.push_back(in);
      me.outputs.push_back(*out);
    }
    const std::string key = absl::StrCat(args_.group_key, "/", args_.instance_key, "/", ctx->step_id());
    struct Watch {
      absl::Mutex mu;
      bool joined ABSL_GUARDED_BY(mu) = false;
      absl::Status early ABSL_GUARDED_BY(mu);
    };
    auto watch = std::make_shared<Watch>();
    if (Rendezvous* rdv = ctx->rendezvous()) {
      const std::string& dev = gpu->name();
      rdv->RecvLocalAsync(RendezvousKey(dev, 0, dev, absl::StrCat("allreduce_abort/", key), ctx->step_id()),
                          [watch, key](const absl::Status& s, const Tensor&, bool) {
                            if (s.ok()) return;
                            absl::MutexLock lock(&watch->mu);
                            if (!watch->joined) {
                              watch->early = s;
                              return;
                            }
                            Gather().Abort(key, s);
                          });
    }
    std::optional<RankGather::Group> group;
    {
      absl::MutexLock lock(&watch->mu);
      if (!watch->early.ok()) {
        ctx->SetStatus(watch->early);
        return done();
      }
      watch->joined = true;
      group = Gather().Join(key, local_rank_, static_cast<int>(group_size_), std::move(me),
                            [ctx, done = std::move(done)](const absl::Status& s) {
                              if (!s.ok()) ctx->SetStatus(s);
                              done();
                            });
    }
    if (group.has_value()) {
      const int64_t group_key = args_.group_key;
      const bool mean = mean_;
      RankGather::Run(*std::move(group), [group_key, mean](std::vector<LocalRank>& ranks) {
        return LaunchLocalGroupOnAnyThread(ranks, group_key, mean);
      });
    }
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
      if (h.ok() && half_) h = ToFloat16OnHost(*h);
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
        if (h.dtype() == DType::kFloat16) {
          // The float16 wire's sums, widened (and scaled) back.
          absl::StatusOr<Tensor> wide = Tensor::Allocate(DType::kFloat32, h.shape());
          if (!wide.ok()) {
            ctx->SetStatus(wide.status());
            break;
          }
          HalfToFloat(h.data<Half>(), scale, wide->data<float>(), h.NumElements());
          h = *std::move(wide);
        } else if (scale != 1.0f) {
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

  // A float16 copy of a float32 host tensor, for the ring.
  static absl::StatusOr<Tensor> ToFloat16OnHost(const Tensor& t) {
    if (t.dtype() != DType::kFloat32) {
      return absl::InvalidArgumentError(
          absl::StrCat("an input is ", DTypeName(t.dtype()), "; a float16 all-reduce takes float32"));
    }
    ASSIGN_OR_RETURN(Tensor h, Tensor::Allocate(DType::kFloat16, t.shape()));
    FloatToHalf(t.data<float>(), h.data<Half>(), t.NumElements());
    return h;
  }

  int64_t group_size_ = 1;
  bool half_ = false;  // wire_dtype float16
  bool mean_ = false;
  std::string nccl_id_;
  int rank_ = -1;
  int local_rank_ = -1;  // rank in group_devices; -1: not an in-process group
  CollectiveRuntime::AllReduceArgs args_;
};

WEFT_REGISTER_KERNEL("CollectiveAllReduce", "GPU", GpuCollectiveAllReduceOp);

}  // namespace
}  // namespace gpu
}  // namespace weft
