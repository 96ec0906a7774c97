// What an elastic job adds to its replicated graph (proto/job.proto
// ElasticPolicy; docs/fault_tolerance.md "Elastic jobs").
//
// MULTI_WORKER_MIRRORED:
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
// PARAMETER_SERVER (sync with every replica, or async): the variables live
// once, on the ps, and outlive any worker. A worker lost mid-step may have
// pushed some of its gradients and not others, so each step is gated the
// same way, on the first ps: sync replicas share one barrier (every update
// waits for every replica's gradient), each async replica has its own. One
// counter there, "elastic/step", counts the steps applied by all replicas
// together; there is nothing to copy.
//
// Thread-safety: pure functions.
#ifndef WEFT_MASTER_ELASTIC_PLAN_H_
#define WEFT_MASTER_ELASTIC_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "master/strategy.h"
#include "proto/graph.pb.h"

namespace weft {
namespace master {

struct ElasticNames {
  // Per replica: its counter's value (int64 scalar), the steps it applied.
  std::vector<std::string> step_reads;
  // sync_from[k]: the targets (one per other replica, on its task) that copy
  // replica k's variables to every other replica.
  // Empty for shared variables.
  std::vector<std::vector<std::string>> sync_from;
  // Whether the variables are shared (on the ps): then step_reads holds the
  // one counter's read.
  bool shared = false;
};

// The counter's name in each replica's store.
inline constexpr char kElasticStepVariable[] = "elastic/step";

// Adds the barriers, the counters and the sync targets above to `graph`,
// the replicated graph whose replica names `rg` gives (its replicas' train
// ops run their updates; `variable_node` lists the variables), and each
// increment to the step targets of `rg` that do not run the train op. With
// an empty `shared_device` the variables are mirrored and each replica's
// nodes go on `replica_devices[r]`; else they are shared and the gates and
// the counter go on `shared_device`. INVALID_ARGUMENT when a replica's train
// op is missing or one of its updates is not in the graph.
absl::Status AddElasticState(const std::vector<std::string>& replica_devices, const std::string& shared_device,
                             ReplicatedGraph* rg, GraphDef* graph, ElasticNames* names);

// The steps a counter says were applied: `value`, read from `source` (a
// task, or "the ps") through step_reads, must hold one int64 that is not
// negative, else DATA_LOSS naming the source and what it sent.
absl::StatusOr<int64_t> AppliedSteps(const Tensor& value, const std::string& source);

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_ELASTIC_PLAN_H_
