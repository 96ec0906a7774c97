// Distribution strategies as graph rewrites (DESIGN.md section 4).
//
// ApplyStrategy takes one replica's training graph (graph/lowering.h) and
// returns the replicated graph with every node on a device, ready for the
// master's prune, place and partition. It needs no RPC, so it is tested on
// its own (strategy_test.cc). This header is the entry point; each
// strategy's rewrite is a file of master/strategies/ on the shared kit of
// master/strategies/rewrite.h, and the settings a job states are checked
// by job/strategy_spec.h (ValidateJob) before any cluster is known.
//
// Each replica r is a copy of the one-replica graph under the prefix
// "replica_r/" on replica_devices[r]. What is shared, and how gradients meet,
// depends on the strategy:
//
//   MULTI_WORKER_MIRRORED  every replica keeps its own copy of each variable
//     (same name and initial values in each task, attr shared_name). The
//     gradients feeding the updates are grouped into buckets of about
//     fusion_bytes, in a fixed order, and each bucket goes through one
//     CollectiveAllReduce (mean) per replica, so every copy gets the same
//     update. When every replica of a group of several is on a GPU and
//     options.new_nccl_id is set, each of the group's all-reduces carries
//     the group's one NCCL unique id (attr nccl_unique_id), so the workers
//     reduce through NCCL instead of the gRPC ring, and each replica's
//     buckets are chained by control edges (the last bucket first) so every
//     rank issues them to the shared communicator in the same order.
//   MIRRORED  copies of each variable on each local device of one task
//     (distinct names, identical initial values via init_name). When every
//     replica is on a GPU of its own (cross_device_ops AUTO or NCCL), the
//     gradients are bucketed as for MULTI_WORKER_MIRRORED and each bucket
//     goes through one CollectiveAllReduce (mean) per replica whose
//     group_devices lists the replicas' GPUs: the worker reduces them in
//     process with NCCL, every copy applying its own replica's result.
//     Otherwise (CPU devices, REDUCE_TO_FIRST_DEVICE) the mean gradient is
//     summed in process (AddN, scaled by 1/N) on the first device and every
//     copy applies it.
//   PARAMETER_SERVER, sync  variables and their updates live on the ps
//     devices, spread by bytes (a variable stays with its optimizer slots and
//     update); each update applies the mean of the N replicas' gradients, on
//     the ps, once per step.
//   PARAMETER_SERVER, sync, replicas_to_aggregate k (1 <= k <= N)  the
//     variables on the ps as above, but the replicas run free: per replica
//     and update, an AccumulatorStep reads the variable's accumulator's
//     global step before the replica reads the variable (an Identity on the
//     ps ordered after it), and an AccumulateApply<Op> pushes the replica's
//     gradient with that step. The ps applies the mean of the first k
//     current gradients once per global step and refuses stale ones
//     (runtime/kernels/accumulator.h); each replica has its own train op and its pushes'
//     outcomes (push_outcomes), and there is no one-step train op or loss.
//   PARAMETER_SERVER, async  as above, but each replica has its own update
//     ops with its own gradient and its own train op: replicas step at their
//     own pace (the master runs one step loop per replica).
//     A variable above max_shard_bytes is split into row shards first.
//   CENTRAL_STORAGE  the sync parameter-server rewrite with the variables on
//     one device of the worker (its CPU) and the replicas on its devices.
//
// Sync strategies end in one `train` target that runs every replica, and a
// `loss` that is the mean of the replicas' losses.
//
// Thread-safety: ApplyStrategy is a pure function but for the calls it makes
// to options.new_nccl_id.
#ifndef WEFT_MASTER_STRATEGY_H_
#define WEFT_MASTER_STRATEGY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "graph/lowering.h"
#include "job/defaults.h"
#include "proto/job.pb.h"

namespace weft {
namespace master {

// Makes a fresh NCCL unique id in NewNcclUniqueId's encoding
// (runtime/gpu/nccl_communicators.h). The process that makes an id hosts
// NCCL's bootstrap root for it and must outlive the ranks' joining.
using NcclIdGenerator = std::function<absl::StatusOr<std::string>()>;

struct StrategyOptions {
  StrategySpec::Kind kind = StrategySpec::NONE;
  bool sync = true;  // PARAMETER_SERVER only; the others are always sync
  // One replica per device, e.g. "/job:worker/task:1/device:CPU:0".
  std::vector<std::string> replica_devices;
  // Where shared variables live (PARAMETER_SERVER: the ps tasks' CPUs;
  // CENTRAL_STORAGE: one device). Unused by the mirrored strategies.
  std::vector<std::string> variable_devices;
  // Target bucket size for fused all-reduce (MULTI_WORKER_MIRRORED).
  int64_t fusion_bytes = kDefaultFusionBytes;
  // Identifies the job's collective group on the workers.
  int64_t group_key = 1;
  // PARAMETER_SERVER / CENTRAL_STORAGE: a variable larger than this is split
  // into row shards of at most about this size (with its optimizer slots),
  // spread over the variable devices like any variable; replicas read the
  // shards stacked back (ConcatRows) and each shard's update applies its rows
  // of the gradient (SliceRows). 0: never split.
  int64_t max_shard_bytes = 0;
  // PARAMETER_SERVER with sync only: 0 keeps the lockstep step of all N
  // replicas; k in [1, N] aggregates the first k gradients per global step
  // on the ps (see above).
  int replicas_to_aggregate = 0;
  // MULTI_WORKER_MIRRORED: called once per all-reduce group of two or more
  // replicas, all on GPUs, for the id every rank's communicator is made
  // from (one id, so one communicator, for all of the group's buckets).
  // Empty (tests, a build without NCCL): no ids, and the GPUs reduce
  // through host copies and the gRPC ring, as CPU replicas always do.
  NcclIdGenerator new_nccl_id;
  // MIRRORED only: how the replicas' gradients meet (see above).
  StrategySpec::CrossDeviceOps cross_device_ops = StrategySpec::AUTO;
  // MULTI_WORKER_MIRRORED on CPU replicas: gradients all-reduced as float16
  // (MixedPrecision.float16_all_reduce); refused for GPU replicas.
  bool float16_all_reduce = false;
};

struct ReplicaNames {
  std::string features;  // the replica's input placeholders
  std::string labels;
  std::string loss;
  std::string train_op;  // runs this replica's step (async PS: alone)
  // The same step as train_op, as the nodes to target directly, each on the
  // task that runs it: for async and k-of-N PS the replica's updates (or
  // pushes) on the ps, so that no control signal crosses from the ps to the
  // replica's train op, one transfer per update and step. Empty: target
  // train_op (ReplicaTargets).
  std::vector<std::string> train_targets;
  // replicas_to_aggregate > 0: each update's push outcome (int64 scalar: -1
  // refused as stale, 0 applied by another push, 1 applied by this one), in
  // the same update order for every replica.
  std::vector<std::string> push_outcomes;
};

// What a step of one replica targets: names.train_targets, or train_op.
std::vector<std::string> ReplicaTargets(const ReplicaNames& names);

struct ReplicatedGraph {
  std::unique_ptr<Graph> graph;
  std::vector<ReplicaNames> replicas;
  // Sync: runs one step of every replica. Async: empty; use the replicas'.
  std::string train_op;
  // Sync: the same step as train_op, as the nodes to target directly, each
  // on the task that runs it, so no control signal crosses tasks (for PS,
  // the updates on the ps; for the mirrored strategies, each replica's
  // train op). A step driver that also fetches every replica's loss from its
  // own task and averages them avoids every cross-task hop but the model's.
  std::vector<std::string> train_targets;
  std::string loss;       // sync: mean of the replicas' losses
  std::string correct;    // evaluation on replica 0 ("" when none)
  std::string eval_loss;
  std::string correct_top_k;  // replica 0's, "" unless the job sets eval.top_k
  // Each variable of the one-replica graph: the node holding its value (the
  // shared one, or replica 0's copy) and that node's device.
  std::map<std::string, std::string> variable_node;
  std::map<std::string, std::string> variable_device;
  // Number of CollectiveAllReduce buckets per replica (mirrored across tasks).
  int num_buckets = 0;
  // All-reduce groups given an NCCL unique id; and, when new_nccl_id failed
  // for a group (which then takes the gRPC ring), its error.
  int num_nccl_groups = 0;
  absl::Status nccl_id_status;
  // StrategyOptions::replicas_to_aggregate: 0, or k of the accumulator mode.
  int replicas_to_aggregate = 0;
};

// INVALID_ARGUMENT for an unknown or NONE strategy, no replica devices, a
// parameter-server strategy without variable devices, replicas_to_aggregate
// outside [0, N] or set without sync PARAMETER_SERVER, or a graph whose
// updates this rewrite cannot read (an update whose inputs are not variables
// plus a gradient).
absl::StatusOr<ReplicatedGraph> ApplyStrategy(const TrainingGraph& training, const StrategyOptions& options);

// The name of node `name` in replica r.
std::string ReplicaName(int r, const std::string& name);

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_STRATEGY_H_
