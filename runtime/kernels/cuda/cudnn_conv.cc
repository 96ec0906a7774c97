#include "runtime/kernels/cuda/cudnn_conv.h"

#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "runtime/kernels/cuda/cudnn_util.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"

namespace weft {
namespace gpu_kernels {
namespace {

using cudnn_util::BestMilliseconds;
using cudnn_util::ConvDescs;
using cudnn_util::FitsInt;
using cudnn_util::kOne;
using cudnn_util::kZero;
using cudnn_util::ShapeCache;

std::atomic<bool>& UseCudnnFlag() {
  static std::atomic<bool> flag([] {
    const char* env = std::getenv("WEFT_CUDNN");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }());
  return flag;
}

std::atomic<int64_t> convolutions{0};
std::atomic<int64_t> timings{0};

// ---- Algorithm choice ----------------------------------------------------------------

enum class Pass { kForward = 0, kBackpropInput = 1, kBackpropFilter = 2 };

const char* PassName(Pass pass) {
  switch (pass) {
    case Pass::kForward:
      return "Conv2D";
    case Pass::kBackpropInput:
      return "Conv2DBackpropInput";
    case Pass::kBackpropFilter:
      return "Conv2DBackpropFilter";
  }
  return "?";
}

// A pass's descriptors and algorithm for one shape, made on its first use and
// kept, so that a warm step creates no cuDNN descriptor (each is a host
// allocation) and asks cuDNN nothing.
struct Plan {
  bool usable = false;  // false: the fallback (no acceptable algorithm, or it was timed faster)
  int algo = 0;         // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  bool timed = false;   // chosen by timing (autotuning) over the heuristic's pick
  size_t workspace_bytes = 0;
  std::shared_ptr<const ConvDescs> descs;  // set when usable
};

// (ordinal, pass, n, h, w, cin, kh, kw, cout, stride, pad_top, pad_left).
using PlanKey = std::array<int64_t, 12>;

ShapeCache<PlanKey, Plan>& Plans() {
  static auto* cache = new ShapeCache<PlanKey, Plan>;
  return *cache;
}

void* WorkspaceData(Tensor& t, size_t bytes) { return bytes == 0 ? nullptr : t.raw_data(); }

// bytes <= kMaxWorkspaceBytes (ChoosePlan drops larger plans), so the float
// count fits.
absl::StatusOr<Tensor> Workspace(OpKernelContext* ctx, size_t bytes) {
  return Scratch(ctx, static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float)));
}

std::atomic<bool>& AutotuneFlag() {
  static std::atomic<bool> flag([] {
    const char* env = std::getenv("WEFT_CUDNN_AUTOTUNE");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }());
  return flag;
}

// A timed alternative replaces the default choice only when it is at least
// this many times faster, so that timing noise between near-equal choices
// does not change a job's choice from run to run.
constexpr float kAutotuneMargin = 1.25f;

// ---- Algorithms ----------------------------------------------------------------------

// The device memory a pass reads and writes: its real operands (outputs are
// written again when the chosen pass runs).
struct Operands {
  const void* a;  // x (forward, filter gradient) or the OHWI filter (input gradient)
  const void* b;  // the OHWI filter (forward) or dy (the gradients)
  void* out;      // y, dx or the OHWI filter gradient
};

// Enqueues pass `pass` with algorithm `algo`.
absl::Status Enqueue(cudnnHandle_t handle, Pass pass, const ConvDescs& d, int algo, Tensor& ws, size_t ws_bytes,
                     const Operands& ops) {
  void* workspace = WorkspaceData(ws, ws_bytes);
  switch (pass) {
    case Pass::kForward:
      WEFT_CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(
          handle, &kOne, d.x.get(), ops.a, d.filter.get(), ops.b, d.conv.get(),
          static_cast<cudnnConvolutionFwdAlgo_t>(algo), workspace, ws_bytes, &kZero, d.y.get(), ops.out));
      return absl::OkStatus();
    case Pass::kBackpropInput:
      WEFT_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
          handle, &kOne, d.filter.get(), ops.a, d.y.get(), ops.b, d.conv.get(),
          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), workspace, ws_bytes, &kZero, d.x.get(), ops.out));
      return absl::OkStatus();
    case Pass::kBackpropFilter:
      WEFT_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
          handle, &kOne, d.x.get(), ops.a, d.y.get(), ops.b, d.conv.get(),
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), workspace, ws_bytes, &kZero, d.filter.get(), ops.out));
      return absl::OkStatus();
  }
  return absl::InternalError("unknown convolution pass");
}

// An algorithm cuDNN proposed, with the workspace it needs.
struct Candidate {
  int algo;
  size_t workspace_bytes;
};

// How many of the heuristic's acceptable candidates autotuning times.
constexpr int kMaxCandidates = 3;

// Whether weft may use a candidate: it ran cuDNN's check, is deterministic,
// uses no tensor cores and fits the workspace cap.
bool Acceptable(cudnnStatus_t status, cudnnDeterminism_t determinism, cudnnMathType_t math, size_t memory) {
  return status == CUDNN_STATUS_SUCCESS && determinism == CUDNN_DETERMINISTIC && math != CUDNN_TENSOR_OP_MATH &&
         math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && memory <= kMaxWorkspaceBytes;
}

template <typename Perf>
std::vector<Candidate> AcceptableCandidates(const Perf* perf, int count) {
  std::vector<Candidate> out;
  for (int i = 0; i < count && static_cast<int>(out.size()) < kMaxCandidates; ++i) {
    if (Acceptable(perf[i].status, perf[i].determinism, perf[i].mathType, perf[i].memory)) {
      out.push_back({static_cast<int>(perf[i].algo), perf[i].memory});
    }
  }
  return out;
}

// The heuristic's acceptable candidates for the pass, best first.
absl::StatusOr<std::vector<Candidate>> Candidates(cudnnHandle_t handle, Pass pass, const ConvDescs& d) {
  int count = 0;
  switch (pass) {
    case Pass::kForward: {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      WEFT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(
          handle, d.x.get(), d.filter.get(), d.conv.get(), d.y.get(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
      return AcceptableCandidates(perf, count);
    }
    case Pass::kBackpropInput: {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      WEFT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          handle, d.filter.get(), d.y.get(), d.conv.get(), d.x.get(), CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count,
          perf));
      return AcceptableCandidates(perf, count);
    }
    case Pass::kBackpropFilter: {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      WEFT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          handle, d.x.get(), d.y.get(), d.conv.get(), d.filter.get(), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count,
          perf));
      return AcceptableCandidates(perf, count);
    }
  }
  return absl::InternalError("unknown convolution pass");
}

// The workspace cuDNN states for `algo` (the heuristic's figure may differ).
absl::StatusOr<size_t> WorkspaceSize(cudnnHandle_t handle, Pass pass, const ConvDescs& d, int algo) {
  size_t bytes = 0;
  switch (pass) {
    case Pass::kForward:
      WEFT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardWorkspaceSize(
          handle, d.x.get(), d.filter.get(), d.conv.get(), d.y.get(), static_cast<cudnnConvolutionFwdAlgo_t>(algo),
          &bytes));
      break;
    case Pass::kBackpropInput:
      WEFT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataWorkspaceSize(
          handle, d.filter.get(), d.y.get(), d.conv.get(), d.x.get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(algo),
          &bytes));
      break;
    case Pass::kBackpropFilter:
      WEFT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterWorkspaceSize(
          handle, d.x.get(), d.y.get(), d.conv.get(), d.filter.get(),
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &bytes));
      break;
  }
  return bytes;
}

// The heuristic's first acceptable algorithm, or with autotuning the
// fastest of its first few on these operands where it beats the first by
// kAutotuneMargin.
absl::StatusOr<Plan> ChoosePlan(OpKernelContext* ctx, Pass pass, const ConvDescs& d, const Operands& ops) {
  cudnnHandle_t handle = Gpu(ctx)->cudnn();
  Plan plan;
  ASSIGN_OR_RETURN(std::vector<Candidate> candidates, Candidates(handle, pass, d));
  for (Candidate& c : candidates) {
    ASSIGN_OR_RETURN(c.workspace_bytes, WorkspaceSize(handle, pass, d, c.algo));
  }
  candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                  [](const Candidate& c) { return c.workspace_bytes > kMaxWorkspaceBytes; }),
                   candidates.end());
  if (candidates.empty()) return plan;
  size_t best = 0;
  if (AutotuneFlag().load(std::memory_order_relaxed) && candidates.size() > 1) {
    std::vector<float> ms(candidates.size());
    for (size_t i = 0; i < candidates.size(); ++i) {
      ASSIGN_OR_RETURN(Tensor ws, Workspace(ctx, candidates[i].workspace_bytes));
      ASSIGN_OR_RETURN(ms[i], BestMilliseconds(ctx, [&] {
                         return Enqueue(handle, pass, d, candidates[i].algo, ws, candidates[i].workspace_bytes, ops);
                       }));
    }
    size_t fastest = 0;
    for (size_t i = 1; i < ms.size(); ++i) {
      if (ms[i] < ms[fastest]) fastest = i;
    }
    if (ms[fastest] * kAutotuneMargin <= ms[0]) {
      best = fastest;
      plan.timed = true;
    }
  }
  plan.usable = true;
  plan.algo = candidates[best].algo;
  plan.workspace_bytes = candidates[best].workspace_bytes;
  return plan;
}

}  // namespace

bool UseCudnn() { return UseCudnnFlag().load(std::memory_order_relaxed); }
bool CudnnAutotune() { return AutotuneFlag().load(std::memory_order_relaxed); }
void SetCudnnAutotune(bool autotune) { AutotuneFlag().store(autotune, std::memory_order_relaxed); }
void SetUseCudnn(bool use) { UseCudnnFlag().store(use, std::memory_order_relaxed); }
int64_t CudnnConvolutionCount() { return convolutions.load(std::memory_order_relaxed); }
int64_t ConvolutionPathTimings() { return timings.load(std::memory_order_relaxed); }

bool CudnnCanConvolve(const kernels::ConvGeometry& g) {
  return g.HasSymmetricPadding() && FitsInt({g.n, g.h, g.w, g.cin}) && FitsInt({g.n, g.ho, g.wo, g.cout}) &&
         FitsInt({g.kh, g.kw, g.cin, g.cout}) && g.stride <= INT_MAX && g.pad_top <= INT_MAX &&
         g.pad_left <= INT_MAX;
}


namespace {

// cuDNN's operands for pass `pass` of g: the filter (forward: b; input
// gradient: a) transposed to OHWI into `ohwi`, or (filter gradient) `ohwi`
// standing for the output, which the caller transposes back.
absl::StatusOr<Operands> CudnnOperands(OpKernelContext* ctx, Pass pass, const kernels::ConvGeometry& g, const float* a,
                                       const float* b, float* out, float* ohwi) {
  Operands ops{a, b, out};
  if (pass == Pass::kForward) {
    WEFT_CUDA_RETURN_IF_ERROR(LaunchTranspose(b, ohwi, g.k(), g.cout, Stream(ctx)));
    ops.b = ohwi;
  } else if (pass == Pass::kBackpropInput) {
    WEFT_CUDA_RETURN_IF_ERROR(LaunchTranspose(a, ohwi, g.k(), g.cout, Stream(ctx)));
    ops.a = ohwi;
  } else {
    ops.out = ohwi;
  }
  return ops;
}

// Pass `pass` of g through cuDNN with `plan`. REQUIRES: plan.usable.
absl::Status RunCudnn(OpKernelContext* ctx, Pass pass, const kernels::ConvGeometry& g, const Plan& plan, const float* a,
                      const float* b, float* out) {
  ASSIGN_OR_RETURN(Tensor ohwi, Scratch(ctx, g.k() * g.cout));
  ASSIGN_OR_RETURN(const Operands ops, CudnnOperands(ctx, pass, g, a, b, out, ohwi.data<float>()));
  ASSIGN_OR_RETURN(Tensor ws, Workspace(ctx, plan.workspace_bytes));
  RETURN_IF_ERROR(Enqueue(Gpu(ctx)->cudnn(), pass, *plan.descs, plan.algo, ws, plan.workspace_bytes, ops));
  if (pass == Pass::kBackpropFilter) {
    // OHWI [cout, kh * kw * cin] back to HWIO [kh * kw * cin, cout].
    WEFT_CUDA_RETURN_IF_ERROR(LaunchTranspose(ohwi.data<float>(), out, g.cout, g.k(), Stream(ctx)));
  }
  return absl::OkStatus();
}

// Times cuDNN's chosen algorithm against the fallback on the op's own
// operands: true when the fallback wins by kAutotuneMargin.
absl::StatusOr<bool> FallbackIsFaster(OpKernelContext* ctx, Pass pass, const kernels::ConvGeometry& g, const Plan& plan,
                                      const float* a, const float* b, float* out,
                                      absl::FunctionRef<absl::Status()> fallback) {
  ASSIGN_OR_RETURN(const float cudnn_ms,
                   BestMilliseconds(ctx, [&] { return RunCudnn(ctx, pass, g, plan, a, b, out); }));
  ASSIGN_OR_RETURN(const float fallback_ms, BestMilliseconds(ctx, [&] { return fallback(); }));
  const bool faster = fallback_ms * kAutotuneMargin <= cudnn_ms;
  Logger("gpu")->debug("{} of x {} and filter [{},{},{},{}]: cuDNN {:.1f} us, im2col + cuBLAS {:.1f} us; using {}",
                       PassName(pass), TensorShape{g.n, g.h, g.w, g.cin}.DebugString(), g.kh, g.kw, g.cin, g.cout,
                       cudnn_ms * 1000, fallback_ms * 1000, faster ? "im2col + cuBLAS" : "cuDNN");
  timings.fetch_add(1, std::memory_order_relaxed);
  return faster;
}

// g's pass on this device, chosen on its first use: cuDNN's algorithm and,
// with autotuning, whether the fallback is faster (both timed on the op's
// own operands, whose outputs the chosen pass then writes again).
absl::StatusOr<Plan> MakePlan(OpKernelContext* ctx, Pass pass, const kernels::ConvGeometry& g, const float* a,
                              const float* b, float* out, absl::FunctionRef<absl::Status()> fallback) {
  Plan plan;
  auto descs = std::make_shared<ConvDescs>();
  RETURN_IF_ERROR(descs->Init(g));
  const ConvDescs& d = *descs;
  // cuDNN's output size must be the one weft computed; it is for symmetric
  // padding, but a disagreement must never write out of bounds.
  int n = 0, c = 0, h = 0, w = 0;
  WEFT_CUDNN_RETURN_IF_ERROR(
      cudnnGetConvolution2dForwardOutputDim(d.conv.get(), d.x.get(), d.filter.get(), &n, &c, &h, &w));
  if (n == g.n && c == g.cout && h == g.ho && w == g.wo) {
    ASSIGN_OR_RETURN(Tensor ohwi, Scratch(ctx, g.k() * g.cout));
    ASSIGN_OR_RETURN(const Operands ops, CudnnOperands(ctx, pass, g, a, b, out, ohwi.data<float>()));
    ASSIGN_OR_RETURN(plan, ChoosePlan(ctx, pass, d, ops));
  }
  if (!plan.usable) {
    Logger("gpu")->info("cuDNN has no deterministic FP32 algorithm within {} MiB of workspace for {} of x {} and "
                        "filter [{},{},{},{}] (stride {}, padding {}x{}); using im2col + cuBLAS",
                        kMaxWorkspaceBytes >> 20, PassName(pass),
                        TensorShape{g.n, g.h, g.w, g.cin}.DebugString(), g.kh, g.kw, g.cin, g.cout, g.stride,
                        g.pad_top, g.pad_left);
    return plan;
  }
  plan.descs = std::move(descs);
  Logger("gpu")->debug("cuDNN {} of x {} and filter [{},{},{},{}] (stride {}, padding {}x{}): algorithm {} ({}), "
                       "{} bytes of workspace",
                       PassName(pass), TensorShape{g.n, g.h, g.w, g.cin}.DebugString(), g.kh, g.kw, g.cin, g.cout,
                       g.stride, g.pad_top, g.pad_left, plan.algo, plan.timed ? "timed" : "heuristic",
                       plan.workspace_bytes);
  if (AutotuneFlag().load(std::memory_order_relaxed)) {
    ASSIGN_OR_RETURN(const bool fallback_faster, FallbackIsFaster(ctx, pass, g, plan, a, b, out, fallback));
    if (fallback_faster) plan = Plan{};
  }
  return plan;
}

Pass ToPass(ConvPass pass) {
  switch (pass) {
    case ConvPass::kForward:
      return Pass::kForward;
    case ConvPass::kBackpropInput:
      return Pass::kBackpropInput;
    case ConvPass::kBackpropFilter:
      return Pass::kBackpropFilter;
  }
  return Pass::kForward;
}

}  // namespace

absl::Status RunConvolution(OpKernelContext* ctx, ConvPass conv_pass, const kernels::ConvGeometry& g, const float* a,
                            const float* b, float* out, absl::FunctionRef<absl::Status()> fallback) {
  const Pass pass = ToPass(conv_pass);
  const PlanKey key = {Gpu(ctx)->ordinal(), static_cast<int64_t>(pass), g.n, g.h, g.w, g.cin, g.kh, g.kw, g.cout,
                       g.stride, g.pad_top, g.pad_left};
  Plan plan;
  if (!Plans().Lookup(key, &plan)) {
    ASSIGN_OR_RETURN(plan, MakePlan(ctx, pass, g, a, b, out, fallback));
    plan = Plans().Insert(key, std::move(plan));
  }
  if (!plan.usable) return fallback();
  RETURN_IF_ERROR(RunCudnn(ctx, pass, g, plan, a, b, out));
  convolutions.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

}  // namespace gpu_kernels
}  // namespace weft
