// Placement: a device for every node of a graph.
//
// PlaceGraph sets each node's assigned_device to one of `devices`, the full
// names of the cluster's devices ("/job:worker/task:0/device:CPU:0"), written
// in canonical form (DeviceName::ToString), so equal devices compare equal as
// strings.
//
// Rules, applied to colocation groups rather than to single nodes:
//  * An op that updates a variable in place must run where the variable's
//    buffer lives. The "reference inputs" of the update ops (input 0 of any
//    stateful Apply* op; inputs 0..1 of ApplyMomentum; 0..3 of ApplyAdam, the
//    variable and its slots) put the op and the producer of that input, and
//    any chain of Identity nodes back from it, into one group (union-find).
//  * A group's request is the merge of its members' requested devices. A
//    member whose request conflicts with another's is INVALID_ARGUMENT naming
//    both nodes and both requests.
//  * A group with a request goes to the first device in `devices` compatible
//    with it (the list order is the preference order: "/job:ps" picks the
//    first ps device listed). No compatible device is INVALID_ARGUMENT naming
//    the node and request and listing the available devices.
//  * A group with no request goes to `default_device`, which must be one of
//    `devices` — or, when options.prefer_gpu is set (the default), to the
//    first GPU of the default device's task ("/job:J/task:T/device:GPU:0")
//    when `devices` lists one and every member's op has a GPU kernel. Which
//    ops have one is the runtime's to say (SetGpuKernelAvailability; graph/
//    does not depend on the runtime); until it says, nothing goes to a GPU
//    unasked. Ops without a GPU kernel (Placeholder, input pipelines, data
//    shuffling) therefore stay on the CPU, and partitioning puts a
//    _Send/_Recv pair on every edge between the two. A group holding a
//    Variable goes to the GPU only when every in-place update op (Apply*)
//    has a GPU kernel too, so a variable lands on the same device whichever
//    subgraph (training step, evaluation) is placed.
//  * Soft placement: a group that asks for a GPU but has a member without a
//    GPU kernel goes to the first CPU of that GPU's task instead.
// Every node is (re)assigned; requested devices are left as they were. The
// result depends only on the graph and the arguments.
//
// Thread-safety: mutates `g`; the caller must own it exclusively.
#ifndef WEFT_GRAPH_PLACER_H_
#define WEFT_GRAPH_PLACER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "graph/graph.h"

namespace weft {

struct PlacementOptions {
  // Put unrequested compute on the default task's GPU:0 when it has one.
  bool prefer_gpu = true;
};

// REQUIRES: g != nullptr. On error no node's assignment has changed.
absl::Status PlaceGraph(Graph* g, const std::vector<std::string>& devices, const std::string& default_device,
                        const PlacementOptions& options = PlacementOptions());

// After PlaceGraph: each node of `placeholders` (feed placeholders; names not
// in `g` are skipped) whose consumers, data and control, all sit on one GPU
// moves to that GPU. A process that feeds a step copies the value to the
// device itself, so a step whose compute is all on the GPU is then one GPU
// partition, with no _Send/_Recv pair per feed.
void PlaceFeedsWithConsumers(Graph* g, const std::vector<std::string>& placeholders);

// Whether `op` has a kernel for device type "GPU" in this process. The
// runtime installs its KernelRegistry's answer once at start-up (before any
// placement); thread-safe to call afterwards.
using GpuKernelAvailability = std::function<bool(absl::string_view op)>;
void SetGpuKernelAvailability(GpuKernelAvailability has_gpu_kernel);

}  // namespace weft

#endif  // WEFT_GRAPH_PLACER_H_
