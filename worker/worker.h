// Worker: one task's side of the distributed runtime, without any RPC.
//
// A Worker owns the task's CPU devices ("/job:J/task:T/device:CPU:i"), its
// registered partitions (GraphMgr) and the rendezvous of its live steps. Its
// handlers have the shape `XAsync(request, response, done)`: GetStatus,
// AbortStep, CleanupStep and RecvTensor complete on the caller's thread
// without blocking; RegisterGraph, DeregisterGraph and RunGraph run on the
// worker's compute pool, so a gRPC reaction that calls them never blocks.
//
// Steps: RunGraph(step_id, iterations=K) runs the partition K times with step
// ids step_id..step_id+K-1 on the rendezvous of step_id. A failure aborts that
// rendezvous (waking every _Recv of the step here, and the peers' pulls of its
// values). AbortStep does the same on the master's order; CleanupStep drops
// the rendezvous when the step is over on every task.
//
// ResetContainers clears variable containers (GraphMgr), on the caller's
// thread: it takes brief locks only.
//
// GetStepState answers on the caller's thread, without the compute pool (a
// hung step may hold every compute thread): the kernels running now (a
// _Recv naming the task it waits for), the collectives in flight and whom
// they wait for, and the last RunGraph calls (StepRing). A failed step's
// record is also logged, once, with the failure.
//
// RecvTensor serves a peer's pull: it waits in the step's local table until
// the value is sent or the step aborts. A key whose send device is on another
// task is INVALID_ARGUMENT; one naming another incarnation of this task
// (nonzero and different) is ABORTED, since that value was lost in a restart.
//
// The cluster: a RegisterGraph may carry every task's address (the master's
// view, the one truth for a task started without its peers' ports). It is
// checked (well-formed, and naming this task) and applied before the graph
// is registered; a bad one fails the call with INVALID_ARGUMENT and
// registers nothing.
//
// Shutdown (also run by the destructor) fails every live and later step with
// UNAVAILABLE, rejects new work, and waits for running steps to return: their
// _Recv waits, collectives and remaining iterations are cut short, so it
// returns promptly whatever the steps were waiting for.
//
// Thread-safety: thread-safe.
#ifndef WEFT_WORKER_WORKER_H_
#define WEFT_WORKER_WORKER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/thread_pool.h"
#include "proto/cluster.pb.h"
#include "proto/worker_service.pb.h"
#include "runtime/collective_runtime.h"
#include "runtime/device.h"
#include "runtime/rendezvous.h"
#include "worker/dataset_cache.h"
#include "worker/graph_mgr.h"
#include "worker/remote_rendezvous.h"
#include "worker/step_ring.h"
#include "worker/worker_interface.h"

namespace weft {
namespace worker {

struct WorkerOptions {
  std::string job = "worker";
  int task_index = 0;
  int num_cpu_devices = 1;
  // GPUs to open as "/job:J/task:T/device:GPU:i": -1 every visible one, 0
  // none. Without CUDA or a GPU the task has only its CPU devices.
  int max_gpus = -1;
  // Threads inside one kernel, per device (0: one per core).
  int intra_op_threads = 1;
  // Threads that run independent nodes of the task's steps in parallel,
  // shared by all steps (0: each step runs inline on its compute thread).
  int inter_op_threads = 2;
  // RunGraph/RegisterGraph calls that run at once.
  int compute_threads = 4;
  // Pulls values sent on other tasks; nullptr for a task without peers.
  // Borrowed: must outlive the worker.
  TensorPullerInterface* puller = nullptr;
  // What CollectiveAllReduce kernels use; nullptr: none (a lone task).
  // Borrowed; must outlive the worker.
  CollectiveRuntime* collectives = nullptr;
  // Points whatever reaches peers (the puller, the collectives) at the
  // cluster a RegisterGraph carries, once the worker has checked it. Called
  // on a compute thread, one call at a time, only when the cluster changed.
  // Empty: the worker checks and records the cluster and nothing else.
  std::function<void(const ClusterDef&)> set_cluster;
  // Quotas on what callers create here (sessions, graphs, iterations, the
  // memory a graph declares) and on live steps; see GraphMgr and
  // RendezvousMgr.
  GraphMgrLimits limits;
  RendezvousMgr::Limits rendezvous_limits;
  // Where PutDataset stores uploaded datasets (worker/dataset_cache.h);
  // null: the task takes none. Borrowed; must outlive the worker.
  DatasetCache* datasets = nullptr;
};

class Worker {
 public:
  explicit Worker(const WorkerOptions& options);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // "/job:worker/task:0"
  const std::string& task() const { return task_; }
  // Random, nonzero, fixed for the worker's lifetime.
  uint64_t incarnation() const { return incarnation_; }
  const std::vector<Device*>& devices() const { return device_ptrs_; }

  void GetStatusAsync(const GetStatusRequest* request, GetStatusResponse* response, StatusCallback done);
  void RegisterGraphAsync(const RegisterGraphRequest* request, RegisterGraphResponse* response, StatusCallback done);
  void DeregisterGraphAsync(const DeregisterGraphRequest* request, DeregisterGraphResponse* response,
                            StatusCallback done);
  void RunGraphAsync(const RunGraphRequest* request, RunGraphResponse* response, StatusCallback done);
  void AbortStepAsync(const AbortStepRequest* request, AbortStepResponse* response, StatusCallback done);
  void CleanupStepAsync(const CleanupStepRequest* request, CleanupStepResponse* response, StatusCallback done);
  void GetStepStateAsync(const GetStepStateRequest* request, GetStepStateResponse* response, StatusCallback done);
  // Clears the named containers, or all; INVALID_ARGUMENT for neither, both,
  // more than kMaxResetContainers names or a name of a bad length.
  void ResetContainersAsync(const ResetContainersRequest* request, ResetContainersResponse* response,
                            StatusCallback done);
  // Stores a chunk of an uploaded dataset, on the compute pool;
  // FAILED_PRECONDITION when the task keeps no datasets.
  void PutDatasetAsync(const PutDatasetRequest* request, PutDatasetResponse* response, StatusCallback done);
  // `done` gets the value (sharing the sender's buffer) or the failure.
  // `caller`: the authenticated task asking ("" insecure or in-process),
  // which must be the task the key's tensor is sent to (PERMISSION_DENIED
  // otherwise: a task reads only what the graph sends it).
  void RecvTensorAsync(const RecvTensorRequest* request, const std::string& caller, Rendezvous::DoneCallback done);

  // Marks the task as about to stop (SIGTERM): GetStatus reports draining,
  // so the master checkpoints its jobs before the task goes.
  void SetDraining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  // When the last GetStatus arrived (the master's heartbeat); InfinitePast
  // if none has. A draining task stops waiting for a master that does not
  // poll it.
  absl::Time last_status_call() const {
    const int64_t ns = last_status_call_ns_.load(std::memory_order_relaxed);
    return ns == 0 ? absl::InfinitePast() : absl::FromUnixNanos(ns);
  }

  // Idempotent. Returns once no step is running and none can start.
  // REQUIRES: not called from a callback of this worker (it joins them).
  void Shutdown();

  // For tests and monitoring.
  RendezvousMgr* rendezvous_mgr() { return &rendezvous_mgr_; }
  int NumGraphs() const { return graph_mgr_->NumGraphs(); }
  // Variables held by the live sessions on this task (for tests and tools).
  std::vector<std::string> VariableNames() const { return graph_mgr_->VariableNames(); }
  // The task's variable containers (worker/resource_containers.h).
  const ResourceContainers& containers() const { return graph_mgr_->containers(); }
  // The variable stores of the live sessions (all, or one session's), for the
  // ps's ParameterServer service and tools. See GraphMgr::SessionResources.
  std::vector<GraphMgr::SessionResources> ListSessionResources() const { return graph_mgr_->ListSessionResources(); }
  std::vector<GraphMgr::SessionResources> ListSessionResources(const std::string& session_handle) const {
    return graph_mgr_->ListSessionResources(session_handle);
  }

 private:
  // Runs `fn` on the compute pool, or fails `done` with UNAVAILABLE once the
  // worker is shutting down.
  void Schedule(std::function<void()> fn, const StatusCallback& done);
  absl::Status ShuttingDown() const;
  // Runs an admitted RunGraph from an RPC thread: inline when it may
  // (GraphMgr::RunsInline), else on the compute pool.
  void Dispatch(QueuedRun run);
  // Runs `run`, then each queued step its end releases (GraphMgr::Ended),
  // on this thread while it may, else through Dispatch.
  void RunGraphs(QueuedRun run, bool on_compute_thread);
  // Fails `run` with `status` without running it (its step aborted here),
  // and with it the queued steps that follow it.
  void FailRuns(QueuedRun run, absl::Status status);
  // A step fails here: its rendezvous and collectives are aborted, and its
  // queued RunGraphs fail.
  void AbortStepHere(int64_t step_id, const absl::Status& status);
  // Aborts the collectives of the RunGraph of `step_id`, every iteration's.
  void AbortCollectives(int64_t step_id, const absl::Status& status);
  // Drops a finished step's rendezvous and collective state.
  void CleanupStepState(int64_t step_id);
  // Checks the cluster a RegisterGraph carries and hands it to
  // set_cluster_ if it differs from the last one.
  absl::Status ApplyCluster(const ClusterDef& cluster);

  const std::string job_;
  const int task_index_;
  const std::string task_;
  const uint64_t incarnation_;
  CollectiveRuntime* const collectives_;
  const int max_iterations_;  // GraphMgrLimits::max_iterations
  DatasetCache* const datasets_;
  const std::function<void(const ClusterDef&)> set_cluster_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> last_status_call_ns_{0};
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<Device*> device_ptrs_;
  std::unique_ptr<ThreadPool> inter_op_pool_;
  std::unique_ptr<GraphMgr> graph_mgr_;
  RendezvousMgr rendezvous_mgr_;
  StepRing step_ring_;
  // RunGraphs of several iterations running now: step id -> iterations.
  absl::Mutex iterations_mu_;
  absl::flat_hash_map<int64_t, int> iterations_ ABSL_GUARDED_BY(iterations_mu_);
  // Such RunGraphs aborted: their iterations' collectives are cleaned up
  // with the step.
  absl::flat_hash_map<int64_t, int> aborted_iterations_ ABSL_GUARDED_BY(iterations_mu_);

  absl::Mutex cluster_mu_;  // serialises ApplyCluster
  ClusterDef cluster_ ABSL_GUARDED_BY(cluster_mu_);  // the last one applied

  absl::Mutex shutdown_mu_;  // serialises Shutdown; taken before mu_
  absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // RunGraphs running on the threads that received them (GraphMgr::
  // RunsInline); Shutdown waits for them as it joins the pool.
  int inline_runs_ ABSL_GUARDED_BY(mu_) = 0;
  // Set in the constructor; reset (joined) by Shutdown under shutdown_mu_.
  // Schedule uses it under mu_ only while !shutting_down_.
  std::unique_ptr<ThreadPool> compute_pool_;
};

}  // namespace worker
}  // namespace weft

#endif  // WEFT_WORKER_WORKER_H_
