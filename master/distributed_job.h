// A job with a distribution strategy, planned for a cluster: the replicated
// graph (master/strategy.h) with each replica's `features` and `labels`
// placeholders replaced by an InputBatch that reads the replica's shard on its
// own task, plus an evaluation copy of replica 0's forward pass reading the
// test split there. No example passes through the master.
//
// Replica devices, by strategy:
//   PARAMETER_SERVER, MULTI_WORKER_MIRRORED  the first device of each worker
//     task (variables, for PS, on the ps tasks' CPUs);
//   MIRRORED, CENTRAL_STORAGE  the devices of worker 0 (num_devices of them,
//     default all; `weft worker --cpu_devices=N` gives a task N CPUs), with
//     CENTRAL_STORAGE's variables on its first CPU.
// A task's GPUs come before its CPUs, so workers with GPUs hold GPU replicas;
// MULTI_WORKER_MIRRORED replicas all on GPUs all-reduce through NCCL when
// new_nccl_id is given (master/strategy.h).
// The job's batch_size is the global batch, split evenly across replicas
// (with replicas_to_aggregate k, a global step trains on k of those shares).
//
// Thread-safety: PlanDistributedJob is a pure function.
#ifndef WEFT_MASTER_DISTRIBUTED_JOB_H_
#define WEFT_MASTER_DISTRIBUTED_JOB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/lowering.h"
#include "master/elastic_plan.h"
#include "master/strategy.h"
#include "proto/cluster.pb.h"
#include "proto/graph.pb.h"
#include "proto/job.pb.h"

namespace weft {
namespace master {

struct DistributedPlan {
  GraphDef graph;
  ReplicatedGraph replicated;   // names (its graph is the rewrite's, before inputs)
  int num_replicas = 0;
  int64_t replica_batch = 0;    // examples per replica per step
  std::vector<std::string> replica_tasks;  // the task of each replica's device
  bool sync = true;
  // Sync PS: 0, all replicas in one lockstep step; k > 0, replicas run free
  // and the ps applies the first k current gradients per global step.
  int replicas_to_aggregate = 0;
  // Evaluation on replica 0's task: fetch these per step until `eval_labels`
  // has no rows (the end of the test pass). Empty when the job has none.
  std::string eval_correct;
  std::string eval_loss;
  std::string eval_correct_top_k;  // "" unless the job sets eval.top_k
  std::string eval_labels;
  // An elastic job (JobSpec.elastic): each replica's step counter and the
  // targets that copy one replica's variables to the others
  // (master/elastic_plan.h); empty otherwise.
  ElasticNames elastic;
};

// INVALID_ARGUMENT when the cluster lacks what the strategy needs (ps tasks,
// workers, devices), the global batch does not split evenly, or
// replicas_to_aggregate is outside [0, replicas] or set for another strategy
// than sync PARAMETER_SERVER; the message names the strategy and what is wrong.
// `new_nccl_id` goes to StrategyOptions::new_nccl_id (the master passes
// NewNcclUniqueId when built with NCCL; tests a fake or nothing).
// `start_step` > 0 plans a job resumed at that step: each replica's input
// passes over the batches it read before (exactly for sync replicas).
// An elastic job's replicas read slices of one global order of each epoch
// (InputBatch's global_batch), so a plan at any step over any number of
// replicas reads on where the last left off, and get the elastic state.
absl::StatusOr<DistributedPlan> PlanDistributedJob(const JobSpec& job, const TrainingGraph& training,
                                                   const std::vector<std::string>& devices,
                                                   const NcclIdGenerator& new_nccl_id = nullptr,
                                                   int64_t start_step = 0);

// A job without a strategy, planned the same way as one replica: the
// training graph as it is (nodes keep their requested devices, the others go
// to the session's default device), its `features` and `labels` placeholders
// replaced by an InputBatch without a device (so on the session's default
// device, where the feeds went) that reads the whole training split on that
// task in the order LocalTrainer's iterator gives, and the evaluation copy
// of a distributed job. `replicated.graph` stays null.
absl::StatusOr<DistributedPlan> PlanUndistributedJob(const JobSpec& job, const TrainingGraph& training);

// Why NCCL cannot join the cluster's GPUs, or "" when it can: NCCL refuses
// two ranks on one GPU, so every GPU must report a physical_device_desc (its
// UUID) that no other GPU device shares, as when two tasks on one machine
// both open its only GPU. The master then hands out no NCCL id and GPU
// all-reduces take the gRPC ring on host copies.
std::string WhyNotNccl(const std::vector<DeviceAttributes>& devices);

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_DISTRIBUTED_JOB_H_
