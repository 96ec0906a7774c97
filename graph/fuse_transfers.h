// Transfer fusion: tensors that cross between the same two tasks at the same
// point of a step travel as one message.
//
// Partitioning (graph/partition.h) gives every cut edge its own _Send/_Recv
// pair, and every pair costs a RecvTensor RPC per step. A parameter-server
// step moves each variable to each worker and each gradient back, so the
// MLP's 6 variables cost 12 RPCs a step, and on a small machine the RPCs'
// thread hand-offs, not their bytes, bound the step. FuseCrossTaskTransfers
// rewrites the partitions so that a group of data sends from device S to a
// device D of another task becomes
//
//     S: PackTensors(x_0, ..., x_n-1) -> one _Send
//     D: one _Recv -> UnpackTensors -> y_0, ..., y_n-1 (the consumers' inputs)
//
// A group is the sends from S to D of one dtype, with static shapes, whose
// sources are at the same cross-task depth: depth(n) is the largest number of
// task boundaries on any path into n. A round trip through another task adds
// at least 2, so no member of a group can wait (through D or any other task)
// for another member's delivery, and packing cannot deadlock a step. Sends
// to devices of the same task (cheap in-process hand-offs), sends from or to
// non-CPU devices (the fusion ops have CPU kernels only), control sends and
// client-terminated ends are left alone.
//
// The cost is one copy of each fused tensor on each side (memcpy speed),
// against an RPC per tensor saved.
//
// Thread-safety: pure function.
#ifndef WEFT_GRAPH_FUSE_TRANSFERS_H_
#define WEFT_GRAPH_FUSE_TRANSFERS_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "proto/graph.pb.h"

namespace weft {

struct FuseTransfersStats {
  int groups = 0;        // fused messages
  int sends_fused = 0;   // original _Send/_Recv pairs they replace
};

// `placed` is the graph `parts` was partitioned from (PartitionGraph), with
// assigned devices. Rewrites `parts` in place.
absl::StatusOr<FuseTransfersStats> FuseCrossTaskTransfers(const Graph& placed,
                                                          std::map<std::string, GraphDef>* parts);

}  // namespace weft

#endif  // WEFT_GRAPH_FUSE_TRANSFERS_H_
