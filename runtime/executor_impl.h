// The executor's internals, shared by its two source files: executor.cc
// (steps run kernel by kernel) and executor_recording.cc (steps recorded on
// a device and replayed, step_recording.h). Internal to the executor.
//
// Thread-safety: as Executor's.
#ifndef WEFT_RUNTIME_EXECUTOR_IMPL_H_
#define WEFT_RUNTIME_EXECUTOR_IMPL_H_

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "runtime/executor.h"
#include "runtime/executor_plan.h"
#include "runtime/op_kernel.h"
#include "runtime/step_recording.h"
#include "runtime/trace_recorder.h"

namespace weft {

// An async kernel's call in flight: its inputs and context must outlive
// ComputeAsync.
struct AsyncCall {
  absl::InlinedVector<const Tensor*, 4> inputs;
  std::optional<OpKernelContext> ctx;
};

// One step's mutable state; reused across steps through Impl::free_states.
struct RunState {
  std::vector<Tensor> slots;
  std::unique_ptr<std::atomic<int>[]> pending;
  std::unique_ptr<std::atomic<int>[]> slot_refs;
  std::vector<int> stack;  // ready nodes, inline mode
  std::vector<AsyncCall> async_calls;
  // One per async call: set by whichever of its `done` and the executor's
  // exception handler finishes the call first, so it finishes once.
  std::unique_ptr<std::atomic<bool>[]> async_finished;
  // Per item: when its kernel started (CoarseMonotonicNanos), 0 while it
  // does not run. What RunningKernels reads.
  std::unique_ptr<std::atomic<int64_t>[]> started_ns;
  // A traced step (`weft trace`): where its kernels' spans go, and when
  // each kernel started (TraceRecorder::NowMicros). Null when not traced.
  TraceRecorder* trace = nullptr;
  std::unique_ptr<int64_t[]> trace_start_us;
  // Inline mode with async kernels: ready nodes that completions hand back
  // to the thread running the step.
  std::vector<int> handed_back ABSL_GUARDED_BY(mu);
  absl::Span<const Tensor> feeds;
  int64_t step_id = 0;
  Rendezvous* rendezvous = nullptr;
  std::atomic<bool> aborted{false};
  // The step holds the device's compute_mutex throughout (a recording).
  bool device_locked = false;
  std::atomic<int> outstanding{0};
  absl::Mutex mu;
  absl::Status status ABSL_GUARDED_BY(mu);
  absl::Notification* done = nullptr;
};

// The plan (executor_plan.h) and the step machinery that runs it.
struct Executor::Impl : ExecutorPlan {
  const Graph* graph;
  Device* device;
  ExecutorOptions options;

  absl::Mutex pool_mu;
  std::vector<std::unique_ptr<RunState>> free_states ABSL_GUARDED_BY(pool_mu);
  // The states of the steps running now, each with its step id set.
  std::vector<RunState*> active ABSL_GUARDED_BY(pool_mu);
  // Set when options.record_device_steps holds and the plan can be recorded.
  std::unique_ptr<StepRecording> recording;
  // With a recording, where kernels that ask (UsesDeviceStepId) read the
  // step id: an int64 scalar on the device, written before each step.
  Tensor step_on_device;

  std::unique_ptr<RunState> AcquireState(int64_t step_id);
  void ReleaseState(std::unique_ptr<RunState> state);
  // Runs item `i`. A synchronous kernel's ready successors come back in
  // `ready` and Process returns true; an async kernel returns false at once
  // and its completion calls OnAsyncDone. After the step's abort only a
  // commit node (kCommitAttr) runs; any other returns true, readying nothing.
  bool Process(RunState* s, int i, absl::InlinedVector<int, 8>* ready);
  // Checks outputs, releases inputs and collects ready successors (after the
  // abort only commit ones, and none when the node failed).
  void Finish(RunState* s, int i, const absl::Status& status, absl::InlinedVector<int, 8>* ready);
  void OnAsyncDone(RunState* s, int i);
  void ProcessAsync(RunState* s, int i);
  void RunInlineWithAsync(RunState* s);
  void Abort(RunState* s, const absl::Status& status);

  // Run's parts: the feeds against the plan's endpoints; the step's nodes
  // run to the end (or the abort) in whichever mode the options call for;
  // the fetches copied out, the device synchronised and the step's status.
  absl::Status CheckFeeds(absl::Span<const Tensor> feeds) const;
  void Drive(RunState* s);
  absl::Status EndStep(RunState* s, std::vector<Tensor>* fetches);
  // A state for a step with `feeds`, its counts set.
  std::unique_ptr<RunState> StartState(absl::Span<const Tensor> feeds, int64_t step_id);
  // Records the step (StepRecording::Action::kRecord) and runs it once;
  // nothing when it could not be recorded and must run kernel by kernel.
  std::optional<absl::Status> RecordStep(absl::Span<const Tensor> feeds, std::vector<Tensor>* fetches,
                                         int64_t step_id);
  absl::Status ReplayStep(absl::Span<const Tensor> feeds, std::vector<Tensor>* fetches);
  // Writes step_id to step_on_device, when there is one, ordered before
  // the kernels enqueued after it. REQUIRES: the device's compute_mutex.
  absl::Status WriteStepId(int64_t step_id);
};

}  // namespace weft

#endif  // WEFT_RUNTIME_EXECUTOR_IMPL_H_
