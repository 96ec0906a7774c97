// The dataflow executor: runs a graph's nodes on one device.
//
// An Executor is built once per (graph, feeds, fetches, targets) signature,
// like a TensorFlow callable: it prunes the graph to what the fetches and
// targets need (fed tensors cut the graph), creates one kernel per node, and
// precomputes the dependency counts. Run then executes a step: nodes whose
// inputs are ready run in parallel on the inter-op pool (or inline on the
// caller when there is none), each output is released as soon as its last
// consumer has run, and the per-run state is reused, so a warm step allocates
// nothing beyond what the caching allocator serves from its cache.
//
// The first failing kernel aborts the step: nodes not yet started are
// skipped (all but commit nodes, kCommitAttr) and Run returns the error
// prefixed by the node's name and op. A step run with a rendezvous also
// aborts the rendezvous with that error at once, so that _Recv kernels
// blocked in this or a peer's partition wake up instead of waiting for
// values that will never be sent.
//
// On a device with its own memory (a GPU), Run copies host feeds to the
// device, kernels enqueue their work on the device's stream, and Run returns
// once that work is done: fetched tensors come back as host tensors, and an
// error a kernel hit asynchronously is the step's error.
//
// Thread-safety: Run may be called concurrently (each call takes its own
// run state); the graph and device must outlive the executor.
#ifndef WEFT_RUNTIME_EXECUTOR_H_
#define WEFT_RUNTIME_EXECUTOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "common/thread_pool.h"
#include "graph/graph.h"
#include "runtime/collective_runtime.h"
#include "runtime/device.h"

namespace weft {

class Rendezvous;
class TraceRecorder;

// The bool attribute that makes a node a commit node, which finishes a
// step's update even when the step aborts. After the abort a commit node
// still runs once all of its inputs (data and control) have finished, and a
// node that finishes after the abort still counts down its commit
// successors; other nodes are skipped as before. A node that fails counts
// down none of its successors, so a commit node runs only when all of its
// inputs succeeded.
//
// The contract this gives a graph (the master's elastic training): make a
// barrier and the updates it gates commit nodes, and give every update only
// inputs that are the barrier, another gated node, or upstream of the
// barrier. Then the barrier runs exactly when all of its inputs succeed, even
// when the last of them finishes after the abort, and every gated node runs
// exactly when the barrier does: all or none of the updates. A gated node
// that fails aborts the step as any node does and stops its own
// successors. Run still returns the step's first error: commit nodes add
// their side effects, never a result, and Run returns only once every node
// it started has finished.
inline constexpr char kCommitAttr[] = "_commit";

// A kernel running now in one of an executor's steps (RunningKernels).
struct RunningKernel {
  int64_t step_id = 0;
  const Node* node = nullptr;  // the executor's graph's: valid while it is
  absl::Duration elapsed;      // since the kernel started, to a few ms
};

struct ExecutorOptions {
  // Tensor names ("node" or "node:k") fed by the caller, in Run's feed order.
  std::vector<std::string> feeds;
  // Tensor names returned by Run, in order.
  std::vector<std::string> fetches;
  // Node names run for their effects.
  std::vector<std::string> targets;
  // Runs independent nodes in parallel; nullptr runs everything on the caller.
  ThreadPool* inter_op_pool = nullptr;
  // Where Variable ops keep their values; nullptr uses the device's. A worker
  // gives each session its own, so two jobs never share weights.
  ResourceMgr* resources = nullptr;
  // Where Variable ops with a non-empty attr `container` keep their values,
  // resolved once per kernel when the executor is built; empty: those
  // variables live in `resources` too.
  ResourceContainerFn containers;
  // What collective kernels use (a worker's); nullptr outside a worker.
  CollectiveRuntime* collectives = nullptr;
  // On a device that can (a GPU): record a steady step's kernels once as a
  // CUDA graph and replay it on later steps with the same feed shapes
  // (runtime/step_recording.h). A plan that cannot be recorded (a Dropout,
  // a _Recv, a thread pool) runs kernel by kernel, the reason logged once.
  bool record_device_steps = false;
};

class Executor {
 public:
  // `graph` and `device` must outlive the executor.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(const Graph* graph, Device* device, ExecutorOptions options);
  ~Executor();

  // Feeds must match options.feeds in number, dtype and (known dims of) shape.
  absl::Status Run(absl::Span<const Tensor> feeds, std::vector<Tensor>* fetches, int64_t step_id = 0);
  // Run with the step's rendezvous, which _Send/_Recv kernels use
  // (OpKernelContext::rendezvous()); it must outlive the call.
  absl::Status Run(absl::Span<const Tensor> feeds, std::vector<Tensor>* fetches, int64_t step_id,
                   Rendezvous* rendezvous);
  // Run that records each kernel's start and end into `trace` (`weft
  // trace`); null records nothing, at the cost of a branch per kernel.
  absl::Status Run(absl::Span<const Tensor> feeds, std::vector<Tensor>* fetches, int64_t step_id,
                   Rendezvous* rendezvous, TraceRecorder* trace);

  // Number of nodes the pruned graph runs each step.
  int num_nodes() const;
  // True when a step can wait for something other than its own kernels'
  // compute: an asynchronous kernel (a _Recv, a collective, a parked push)
  // or a device with its own memory, whose work Run waits for. A step
  // without either only computes, so a caller may run it on a thread that
  // must not block (RunGraph on its RPC thread).
  bool MayWait() const;
  // The host feeds of the step after the next Run, when the caller knows
  // them: a step replayed from a recording (record_device_steps) starts
  // copying them to the device while it computes, and the Run with these
  // very tensors then copies nothing from the host; their contents must not
  // change in between. Ignored otherwise.
  void SetNextFeeds(std::vector<Tensor> next);
  // Steps replayed from a recording so far (record_device_steps), and those
  // of them whose feeds had been copied ahead.
  int64_t replayed_steps() const;
  int64_t replayed_steps_copied_ahead() const;

  // Appends the kernels of the steps running now that have started and not
  // finished: an asynchronous one (a _Recv, a collective) counts until its
  // value or its peers arrive. What a step waits on, for diagnosis. Costs
  // the steps one coarse clock read per kernel; this call locks out the
  // start and end of steps (not their kernels) while it reads.
  void RunningKernels(std::vector<RunningKernel>* out) const;

 private:
  struct Impl;
  explicit Executor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Builds an executor for one call and runs it: a convenience for tests and
// one-off evaluation.
absl::StatusOr<std::vector<Tensor>> RunGraphOnce(const Graph& graph, Device* device,
                                                 const std::vector<std::pair<std::string, Tensor>>& feeds,
                                                 const std::vector<std::string>& fetches,
                                                 const std::vector<std::string>& targets = {});

}  // namespace weft

#endif  // WEFT_RUNTIME_EXECUTOR_H_
