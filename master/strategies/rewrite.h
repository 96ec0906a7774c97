// The shared kit of the strategy rewrites (master/strategy.h): one rewrite's
// state, and the steps every strategy is made of: finding the optimizer
// updates, copying a replica, adding nodes, the mean of the replicas' loss or
// gradients, and assembling the ReplicatedGraph.
//
// The rewrite reads the one-replica graph (from the graph IR, Graph::
// ToGraphDef) and writes the replicated graph as a GraphDef that
// Graph::FromGraphDef turns back into the IR, with shape inference, at the
// end. It edits NodeDefs rather than building on graph/builder.h because the
// strategies rewire inputs of nodes already written (an update copy reads an
// all-reduce made after it) and because the order the nodes are written in
// fixes the replicated graph's node ids, which the master and workers
// depend on. This file is the one place of that GraphDef editing.
//
// Thread-safety: a Rewrite is used by one thread.
#ifndef WEFT_MASTER_STRATEGIES_REWRITE_H_
#define WEFT_MASTER_STRATEGIES_REWRITE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/attr.h"
#include "master/strategy.h"
#include "proto/graph.pb.h"

namespace weft {
namespace master {
namespace strategies {

// One optimizer update: the variables it writes (the variable first, then
// its slots) and the gradient it applies (its last data input).
struct Update {
  const NodeDef* node = nullptr;
  std::vector<std::string> vars;
  int grad_input = 0;
  std::string grad;  // tensor name
  int64_t bytes = 0;  // the variable's (not its slots')
};

using Rename = std::function<std::string(const std::string&)>;

bool IsUpdate(const NodeDef& n);
// A variable's bytes from its shape and dtype; 0 when not fully defined.
int64_t VariableBytes(const NodeDef& v);
// "/job:worker/task:1" of "/job:worker/task:1/device:CPU:0".
std::string TaskOf(const std::string& device);
bool OnGpu(const std::string& device);
// Replica r's name for every node: "replica_r/name".
Rename ReplicaRename(int r);

// One rewrite of `training` under `options`; both must outlive it.
struct Rewrite {
  Rewrite(const TrainingGraph& training, const StrategyOptions& options);

  // Reads the one-replica graph into in_def and finds its updates.
  // REQUIRES: training.graph != nullptr.
  absl::Status Load();
  // Indexes in_def and fills variables / updates / update_names from it.
  // INVALID_ARGUMENT for an update whose inputs are not variables plus a
  // gradient, or a graph without updates.
  absl::Status FindUpdates();
  // Replaces in_def (after a rewrite of the input, e.g. row sharding) and
  // finds its updates again.
  absl::Status ResetInput(GraphDef def);
  // The ReplicatedGraph of out_def and what the strategy recorded.
  absl::StatusOr<ReplicatedGraph> Finish();

  // Replica r's copy of node `n` (renamed inputs, replica's device).
  NodeDef* Copy(const NodeDef& n, int r, const Rename& rename);
  // The node `name` written so far, or nullptr.
  NodeDef* FindOut(const std::string& name);
  NodeDef* Add(const std::string& name, const std::string& op, const std::string& device,
               std::vector<std::string> inputs);
  static void SetAttr(NodeDef* n, std::pair<std::string, AttrValue> attr);
  // The mean loss over replicas, as node "loss" on replica 0's device.
  void MeanLoss();
  // The mean of `terms` (one per replica) as node `name` on `device`;
  // returns its tensor name (the one term itself when n == 1).
  std::string Mean(const std::string& name, const std::string& device, std::vector<std::string> terms);
  // Copies every variable to out_def on its device (device_of), shared by
  // the replicas.
  void AddSharedVariables(const std::map<std::string, std::string>& device_of);

  const TrainingGraph& training;
  const StrategyOptions& options;
  const int n;  // replicas

  GraphDef in_def;   // the one-replica graph (after row sharding)
  GraphDef out_def;  // the replicated graph being written
  absl::flat_hash_map<std::string, const NodeDef*> by_name;  // into in_def
  std::vector<std::string> variables;
  std::vector<Update> updates;
  absl::flat_hash_set<std::string> update_names;

  // What the strategy records for Finish.
  std::map<std::string, std::string> variable_node;
  std::vector<std::string> replica_train;
  std::vector<std::vector<std::string>> replica_targets;  // per replica; may be empty
  std::vector<std::vector<std::string>> push_outcomes;  // per replica (replicas_to_aggregate)
  std::map<std::string, std::vector<std::string>> sharded;  // split variable -> its shard variables
  std::string train_op;
  std::vector<std::string> train_targets;
  std::string loss;
  int num_buckets = 0;
  int num_nccl_groups = 0;
  absl::Status nccl_id_status;
};

}  // namespace strategies
}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_STRATEGIES_REWRITE_H_
