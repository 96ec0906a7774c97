// The executor's plan of a graph: what Executor::Create works out once per
// signature and every step then reads. It prunes the graph to the nodes
// the fetches and targets need (a fed tensor cuts the graph there), creates
// one kernel per node, numbers every output slot, and counts each node's
// pending inputs and each slot's consumers, so a step only counts down.
//
// Internal to the executor (executor.cc); the rest of the runtime uses
// executor.h.
//
// Thread-safety: built once, then only read (kernels are thread-safe).
#ifndef WEFT_RUNTIME_EXECUTOR_PLAN_H_
#define WEFT_RUNTIME_EXECUTOR_PLAN_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "graph/graph.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/op_kernel.h"

namespace weft {

// Where a node input (or a fetch) comes from: a fed tensor or an output slot.
struct InputSource {
  bool fed;
  int index;  // feed index or output slot
};

struct NodeItem {
  const Node* node = nullptr;
  std::unique_ptr<OpKernel> kernel;
  std::vector<InputSource> inputs;
  int first_slot = 0;  // output k lives in slot first_slot + k
  int num_outputs = 0;
  std::vector<int> successors;  // one entry per data or control edge
  int initial_pending = 0;
  int async_index = -1;  // index into the step's async calls for async kernels
  bool commit = false;   // kCommitAttr: runs, and is counted down, after an abort
};

struct ExecutorPlan {
  std::vector<NodeItem> items;  // in id (topological) order
  std::vector<int> roots;       // items with nothing pending
  int num_slots = 0;
  std::vector<int> initial_slot_refs;  // consumers (and fetches) per slot
  std::vector<Endpoint> feed_endpoints;
  std::vector<InputSource> fetch_sources;
  int num_async = 0;  // kernels that may finish after their Compute call returns
};

// Fills *plan (empty) for `options`' feeds, fetches and targets on `device`.
// Errors name the feed, fetch or target at fault, or the node whose kernel
// could not be created.
absl::Status BuildExecutorPlan(const Graph& graph, Device* device, const ExecutorOptions& options, ExecutorPlan* plan);

}  // namespace weft

#endif  // WEFT_RUNTIME_EXECUTOR_PLAN_H_
