// What an elastic MULTI_WORKER_MIRRORED job adds to its replicated graph
// (proto/job.proto ElasticPolicy; docs/fault_tolerance.md "Elastic jobs").
//
// A worker lost mid-step leaves its peers wherever the step's all-reduces
// had got to: one survivor may have received every reduced bucket and
// updated its variables, another may miss the last chunk that the lost
// worker was to forward. To go on from the survivors' memory, each replica's
// step must be all or nothing, and the master must know which survivor got
// furthest:
//
//   - a barrier, replica_r/elastic/commit, waits for every input of every
//     update of the replica (gradients reduced, slots and rates read);
//     every update waits for it. The barrier, the updates and the counter
//     below are commit nodes (runtime/executor.h kCommitAttr): once the
//     barrier ran, the step's abort does not stop them, so a replica either
//     applies the whole step or none of it;
//   - a step counter per replica, replica_r/elastic/step (int64, shared name
//     "elastic/step", so the task's copy survives from one session to the
//     next like every mirrored variable), incremented after the updates:
//     how many steps that replica has applied;
//   - replica_r/elastic/sync_from_k: Assigns of replica k's value of every
//     variable, the counter included, to replica r's, so that after a
//     membership change every replica starts from the survivor that got
//     furthest (and a new worker from a peer's variables).
//
// Thread-safety: pure functions.
#ifndef WEFT_MASTER_ELASTIC_PLAN_H_
#define WEFT_MASTER_ELASTIC_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "master/strategy.h"
#include "proto/graph.pb.h"

namespace weft {
namespace master {

struct ElasticNames {
  // Per replica: its counter's value (int64 scalar), the steps it applied.
  std::vector<std::string> step_reads;
  // sync_from[k]: the targets (one per other replica, on its task) that copy
  // replica k's variables to every other replica.
  std::vector<std::vector<std::string>> sync_from;
};

// The counter's name in each replica's store.
inline constexpr char kElasticStepVariable[] = "elastic/step";

// Adds the barrier, the counter and the sync targets above to `graph`, the
// replicated graph whose replica names `replicated` gives (its replicas'
// train ops run their updates; `variable_node` lists the variables), each
// replica's nodes on `replica_devices[r]`. INVALID_ARGUMENT when a replica's
// train op is missing or one of its updates is not in the graph.
absl::Status AddElasticState(const ReplicatedGraph& replicated, const std::vector<std::string>& replica_devices,
                             GraphDef* graph, ElasticNames* names);

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_ELASTIC_PLAN_H_
