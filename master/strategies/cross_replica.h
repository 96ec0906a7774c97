// The replicas' CrossReplicaSums (graph/ops/collective_ops.cc; the model
// lowering writes them for synchronised batch norm) made to sum across the
// replicas of a rewritten graph.
//
// Thread-safety: as Rewrite.
#ifndef WEFT_MASTER_STRATEGIES_CROSS_REPLICA_H_
#define WEFT_MASTER_STRATEGIES_CROSS_REPLICA_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "master/strategies/mirrored_common.h"
#include "master/strategies/rewrite.h"

namespace weft {
namespace master {
namespace strategies {

// Each replica's copy becomes a CollectiveAllReduce (mean false) in the
// gradients' group, with instance keys after rw.num_buckets'.
// REQUIRES: how is kAcrossTasks or kLocalNccl.
void CrossReplicaAllReduces(Rewrite* rw, Reduction how);

// What is left (the other strategies): with several replicas, each output's
// sum is an AddN of the replicas' inputs on replica 0's device, and every
// replica's copy, the identity, reads those sums. `lockstep` is false for
// replicas that do not run their steps together (asynchronous or k-of-N
// PARAMETER_SERVER): INVALID_ARGUMENT naming the node then.
absl::Status CrossReplicaSumsOnFirstDevice(Rewrite* rw, bool lockstep);

// A node order of replica 0 of out_def that follows the dataflow and is
// the same in every replica: `collectives` (replica 0's, by name) sorted
// so that each comes after everything it depends on, ready collectives
// taking the highest instance_key first. Ops on one NCCL communicator must
// be issued in one order on every rank, and a chain in this order cannot
// close a cycle with the dataflow.
std::vector<std::string> DataflowOrder(const Rewrite& rw, const std::vector<std::string>& collectives);

}  // namespace strategies
}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_STRATEGIES_CROSS_REPLICA_H_
