// ClusterProbe: what every task of the cluster says about itself, asked once.
//
// ProbeCluster sends GetStatus to every task of a worker cache at once and
// gathers each task's answer (its devices, incarnation, whether it drains)
// or its error. One probe serves every reader of an attempt: the job runner
// lists the devices from it to plan the job, then hands the same probe to
// MasterSession::Create, so no task is asked twice. The task monitor's
// heartbeat probes with a deadline, so a task that hangs cannot stall it.
//
// FanOut is the parallel-call skeleton underneath, for other per-task RPCs
// (the checkpointer's ListShards/SaveShard/RestoreShard).
//
// Thread-safety: the functions are thread-safe; a ClusterProbe is a value.
#ifndef WEFT_MASTER_CLUSTER_PROBE_H_
#define WEFT_MASTER_CLUSTER_PROBE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/time.h"
#include "master/worker_cache.h"
#include "proto/worker_service.pb.h"

namespace weft {
namespace master {

// One task's answer to GetStatus.
struct TaskProbe {
  std::string task;
  // False when the worker cache had no client for the task: it was not asked.
  bool has_client = true;
  // OK when the task answered. Otherwise the call's error as the worker gave
  // it (callers name the task with WithTask); NOT_FOUND without a client;
  // DEADLINE_EXCEEDED ("task <t>: no answer to GetStatus within <d>") when
  // the call had not returned by the probe's deadline.
  absl::Status status;
  GetStatusResponse response;  // valid when status.ok()
};

struct ClusterProbe {
  std::vector<TaskProbe> tasks;  // every task, in ListTasks order
};

// Asks every task of `workers` for its status, all in parallel, and waits at
// most `timeout` (infinite: until every call returns). Calls still running
// at the deadline are left to finish on their own; their state outlives the
// probe. `workers` must outlive those calls.
ClusterProbe ProbeCluster(WorkerCacheInterface* workers, absl::Duration timeout = absl::InfiniteDuration());

// The devices of every task of `probe`, in task order, each task's as it
// reported them. Fails with the first failed task's error, naming the task
// ("task <t>: ..."; a task without a client: "... is not in the cluster").
absl::StatusOr<std::vector<DeviceAttributes>> ClusterDevices(const ClusterProbe& probe);

// ClusterDevices(ProbeCluster(workers)).
absl::StatusOr<std::vector<DeviceAttributes>> ListClusterDevices(WorkerCacheInterface* workers);

// Runs `call(i, done)` for every i in [0, n) at once and waits for every
// `done`; returns the statuses by i. `call` must invoke `done` exactly once
// (it may do so before returning). The state behind `done` lives on this
// function's stack, so every call must end before FanOut returns, which
// waiting for all of them guarantees.
template <typename CallFn>
std::vector<absl::Status> FanOut(size_t n, CallFn call) {
  std::vector<absl::Status> statuses(n);
  absl::BlockingCounter pending(static_cast<int>(n));
  for (size_t i = 0; i < n; ++i) {
    call(i, [&statuses, &pending, i](const absl::Status& s) {
      statuses[i] = s;
      pending.DecrementCount();
    });
  }
  pending.Wait();
  return statuses;
}

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_CLUSTER_PROBE_H_
