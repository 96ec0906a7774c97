// MasterSession: one graph run across the cluster's tasks.
//
// A session holds a graph (Create, then Extend to add nodes) and runs steps
// on it. For each distinct (feeds, fetches, targets) signature it prunes the
// graph to what the step needs (graph/prune.h), places every node on a
// device of the cluster (graph/placer.h: a requested device wins, nodes
// without one go to the default device), partitions it per device, inserting
// _Send/_Recv pairs on cut edges (graph/partition.h), and registers each
// partition with its task, all tasks in parallel. Each RegisterGraph carries
// the worker cache's cluster, so a task knows its peers' addresses (as the
// master knows them) before its partition pulls from them. The handles are
// cached, so later steps with that signature only run.
//
// A step draws a fresh step id (a random base plus a counter, so ids from
// different sessions do not collide in a task's rendezvous), sends RunGraph
// to every partition in parallel with each feed routed to the partition
// holding its `_feed/...` placeholder, and gathers the fetches from the
// partitions that hold them. When any partition fails, every other task of
// the step gets AbortStep, so no _Recv waits forever for a peer that will not
// send; the step returns the root cause prefixed by its task
// ("task /job:worker/task:1: node 'x' (MatMul): ..."): the first error that
// is neither an abort nor a _Recv relaying a peer's failure, else the first
// error. Every step, failed or not, is cleaned up on all its tasks: the
// cleanup rides on the task's next RunGraph, or is sent as CleanupStep at
// Close (which waits for those calls).
//
// Thread-safety: thread-safe; concurrent Run calls run concurrent steps.
#ifndef WEFT_MASTER_MASTER_SESSION_H_
#define WEFT_MASTER_MASTER_SESSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tensor.h"
#include "graph/graph.h"
#include "master/cluster_probe.h"
#include "master/step_observer.h"
#include "master/trace_merge.h"
#include "master/worker_cache.h"
#include "proto/graph.pb.h"

namespace weft {
namespace master {

// This process's master incarnation: random, nonzero, fixed for its life.
uint64_t MasterIncarnation();

struct MasterSessionOptions {
  // Device of nodes that request none. Empty: "/job:worker/task:0/device:CPU:0"
  // when the cluster has it, else the first device of a "worker" task, else
  // the first device.
  std::string default_device;
  // Deadline of one RunGraph call (one step on one task).
  absl::Duration step_timeout = absl::InfiniteDuration();
  // Sent with every RegisterGraph: a task drops the graphs of other master
  // incarnations when it sees a new one (worker/graph_mgr.h AdoptMaster).
  uint64_t master_incarnation = MasterIncarnation();
  // Told of every step's start, each RunGraph's end and the step's end
  // (master/step_observer.h); borrowed, outlives the session. May be null.
  StepObserver* observer = nullptr;
};

// The parts of a session's plans and steps, defined in
// master/master_session_internal.h for the files that implement the session.
namespace session_internal {
struct Partition;
struct Plan;
struct PlanEntry;
class Step;
}  // namespace session_internal

class MasterSession {
 public:
  // Asks every task for its devices (GetStatus) and checks `graph_def`.
  // `handle` names the session to the tasks. `workers` must outlive the
  // session. INVALID_ARGUMENT for a bad graph; a task's error names the task.
  static absl::StatusOr<std::unique_ptr<MasterSession>> Create(std::string handle, const GraphDef& graph_def,
                                                               WorkerCacheInterface* workers,
                                                               MasterSessionOptions options = {});
  // As above, but the devices and incarnations come from `probe`, which the
  // caller made with ProbeCluster(workers) (to plan a job, say), so no task
  // is asked twice. A task that failed in `probe` fails Create as it would
  // have failed the probe above.
  static absl::StatusOr<std::unique_ptr<MasterSession>> Create(std::string handle, const GraphDef& graph_def,
                                                               WorkerCacheInterface* workers,
                                                               const ClusterProbe& probe,
                                                               MasterSessionOptions options = {});
  // Closes the session if Close has not been called.
  ~MasterSession();
  MasterSession(const MasterSession&) = delete;
  MasterSession& operator=(const MasterSession&) = delete;

  const std::string& handle() const { return handle_; }
  // Every device of the cluster, canonical names, in placement preference order.
  const std::vector<std::string>& devices() const { return devices_; }
  const std::string& default_device() const { return default_device_; }

  // Adds nodes, which may read the session's existing nodes. A name already
  // in the graph, or a node the graph rejects, is INVALID_ARGUMENT and leaves
  // the graph as it was. Registered signatures stay valid: new nodes cannot
  // change what an existing step needs.
  absl::Status Extend(const GraphDef& graph_def);

  // Runs one step: feeds are (tensor name, value); fetches tensor names;
  // targets node names. `outputs` receives one tensor per fetch, in order.
  // With iterations > 1 every task runs its partition that many times back
  // to back in one RunGraph (steps_per_execution; the same feeds each time,
  // so it suits graphs that read their own input): a float32 scalar fetch
  // (a loss) is the mean over the iterations, other fetches the last's.
  absl::Status Run(const std::vector<std::pair<std::string, Tensor>>& feeds, const std::vector<std::string>& fetches,
                   const std::vector<std::string>& targets, std::vector<Tensor>* outputs, int iterations = 1);

  // Run without a thread that waits: when the signature's plan is built, the
  // step starts on the calling thread and `done` gets its status and outputs
  // on the thread of the last task's answer (or of the last AbortStep's, or
  // this one when every call failed at once), and RunAsync returns true.
  // When the plan is not built yet, which means registering partitions and
  // waiting, it returns false and calls nothing: use Run on a thread that
  // may wait. A bad feed or a closed session is reported through `done`.
  //
  // With `after_previous`, the step is pipelined behind the newest step of
  // the same signature that also came with it and still runs: each task
  // runs it only once it has ended that step (RunGraphRequest.after_step_id),
  // and the session aborts it when that step fails. So a caller can keep
  // several steps of one signature in flight, and a task starts the next as
  // soon as it is done with the last, without waiting for the master.
  using RunCallback = std::function<void(absl::Status, std::vector<Tensor>)>;
  bool RunAsync(const std::vector<std::pair<std::string, Tensor>>& feeds, const std::vector<std::string>& fetches,
                const std::vector<std::string>& targets, int iterations, RunCallback done,
                bool after_previous = false);

  // Traces the next steps this session runs (`weft trace`): while
  // `collector` takes steps, each RunGraph asks its task for a trace and the
  // step's calls go to the collector. Replaces an earlier collector.
  void SetTrace(std::shared_ptr<TraceCollector> collector);

  // Sends AbortStep with `reason` to every task of every step running now, so
  // those Run calls return promptly with an error. Returns at once.
  void AbortRunningSteps(const absl::Status& reason);

  // Builds and registers the plan of a signature without running a step, so
  // that every task it touches holds the session (and a checkpoint can be
  // restored into it before the first step).
  absl::Status Prepare(const std::vector<std::string>& fetches, const std::vector<std::string>& targets);

  // `task` restarted and lost its graphs: drops every plan with a partition
  // there (deregistering its partitions on the other tasks) and the task's
  // deferred cleanups, so the next step of those signatures registers anew.
  // Steps running now keep their plans.
  void ForgetTask(const std::string& task);

  // Each task's incarnation when the session was created.
  const std::map<std::string, uint64_t>& task_incarnations() const { return task_incarnations_; }

  // Waits for running steps, then deregisters every graph on every task.
  // Later Run and Extend calls fail with FAILED_PRECONDITION. Idempotent;
  // returns the first deregistration error (graphs are released either way).
  absl::Status Close();

  // Signatures registered so far (each costs one RegisterGraph per partition).
  int num_signatures() const;

 private:
  using Partition = session_internal::Partition;
  using Plan = session_internal::Plan;
  using PlanEntry = session_internal::PlanEntry;
  using Step = session_internal::Step;

  MasterSession(std::string handle, std::unique_ptr<Graph> graph, WorkerCacheInterface* workers,
                MasterSessionOptions options, std::vector<std::string> devices,
                std::map<std::string, std::string> device_task, std::string default_device,
                std::map<std::string, uint64_t> task_incarnations);

  // Both Creates, once the graph is checked: devices, tasks and
  // incarnations from `probe`, and the default device.
  static absl::StatusOr<std::unique_ptr<MasterSession>> CreateFromProbe(std::string handle,
                                                                        std::unique_ptr<Graph> graph,
                                                                        WorkerCacheInterface* workers,
                                                                        const ClusterProbe& probe,
                                                                        MasterSessionOptions options);

  // The plan of a signature, building and registering it on first use.
  absl::StatusOr<std::shared_ptr<const Plan>> GetPlan(const std::vector<std::string>& feeds,
                                                      const std::vector<std::string>& fetches,
                                                      const std::vector<std::string>& targets);
  absl::StatusOr<std::shared_ptr<Plan>> BuildPlan(const Graph& graph, const std::vector<std::string>& feeds,
                                                  const std::vector<std::string>& fetches,
                                                  const std::vector<std::string>& targets);
  absl::Status Register(Plan* plan);
  // Deregisters the partitions of `plan` that have a handle.
  absl::Status Deregister(const Plan& plan);
  // The collector when this step is traced (it takes the step), else null.
  std::shared_ptr<TraceCollector> TraceThisStep();
  // The plan of a signature when it is built, else null; never waits.
  std::shared_ptr<const Plan> BuiltPlan(const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
                                        const std::vector<std::string>& targets) const;
  // Checks a run's iteration count and feeds and counts it as active (Close
  // waits for it, until EndRun); returns the feed names.
  absl::StatusOr<std::vector<std::string>> AdmitRun(const std::vector<std::pair<std::string, Tensor>>& feeds,
                                                    int iterations);
  void EndRun();
  // Sends a step of an admitted run and returns; `done` is called by EndStep
  // on the thread that ends it, after EndRun. `trains`: the step runs targets
  // (for the observer).
  void StartPlan(std::shared_ptr<const Plan> plan, const std::vector<std::pair<std::string, Tensor>>& feeds,
                 int iterations, bool trains, RunCallback done, bool after_previous = false);
  void EndStep(Step* step, std::shared_ptr<TraceCollector> trace, RunCallback done);
  // The fetched values from a finished step's answers, in fetch order.
  absl::Status TakeFetches(const Plan& plan, const Step& step, std::vector<Tensor>* outputs) const;
  // A finished step's cleanup rides on the next RunGraph to each of its tasks
  // (RunGraphRequest.cleanup_step_id), so a task holds at most the steps that
  // ended since its last RunGraph; Close sends the rest as CleanupStep, as
  // does a task's list reaching kMaxDeferredCleanups (many concurrent Runs).
  static constexpr size_t kMaxDeferredCleanups = 32;
  void DeferCleanup(const Plan& plan, int64_t step_id);
  std::vector<int64_t> TakeDeferredCleanup(const std::string& task);
  void SendCleanup(const std::string& task, std::vector<int64_t> step_ids);

  const std::string handle_;
  WorkerCacheInterface* const workers_;
  const MasterSessionOptions options_;
  const std::vector<std::string> devices_;
  const std::map<std::string, std::string> device_task_;  // device -> its task
  const std::string default_device_;
  const std::map<std::string, uint64_t> task_incarnations_;
  const uint64_t step_id_base_;
  std::atomic<uint64_t> step_counter_{0};
  // Set while a trace is armed: steps check it with one relaxed load.
  std::atomic<bool> trace_armed_{false};

  mutable absl::Mutex mu_;
  // Replaced as a whole by Extend; plans being built hold the old one.
  std::shared_ptr<const Graph> graph_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<PlanEntry>> plans_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, std::shared_ptr<Step>> running_ ABSL_GUARDED_BY(mu_);
  int active_runs_ ABSL_GUARDED_BY(mu_) = 0;
  // Ended steps not yet cleaned up, by task; CleanupStep calls in flight.
  absl::flat_hash_map<std::string, std::vector<int64_t>> deferred_cleanup_ ABSL_GUARDED_BY(mu_);
  int pending_cleanups_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<TraceCollector> trace_ ABSL_GUARDED_BY(mu_);
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_MASTER_SESSION_H_
