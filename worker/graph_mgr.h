// GraphMgr: the partitions registered on one task, and how a step runs them.
//
// Register parses a partition (RegisterGraphRequest.graph_def, every node on
// one of this task's devices), builds its executor for the registered feeds,
// fetches and targets, and returns a new, unguessable handle bound to the
// request's session: Run and Deregister must name the same session. Every _Send node of the
// partition is a target too, whether registered or not: a step runs what the
// fetches and targets need plus what peers wait for. Run executes a registered
// graph for a step: validates the fed values against the registered feeds,
// runs the executor `iterations` times with step ids step_id, step_id+1, ...
// all on the one rendezvous given, and returns the requested fetches: a
// float32 scalar (a loss) as the mean over the iterations, others as the
// last iteration left them.
//
// Threads: all graphs share the worker's inter-op pool (or run inline on the
// caller without one). _Recv is asynchronous, so a step waiting for a value
// holds no thread, and steps of one graph may run concurrently.
//
// Quotas (GraphMgrLimits): a caller can create sessions (by naming a new
// session handle), graphs and long steps; each is bounded, and exceeding a
// bound is RESOURCE_EXHAUSTED naming the quota and the daemon flag that sets
// it, leaving everything registered before untouched. A graph whose declared
// shapes alone cannot fit in the memory budget (one output, or all its
// variables together) is refused at registration, naming the node and bytes,
// instead of failing every step.
//
// Containers: a Variable with a non-empty attr `container` lives in the
// task's store of that container (ResourceContainers), not its session's;
// the graph holds the store, and the kernel resolves it once when the graph
// is registered.
//
// CancelAll (shutdown) makes every running and later Run stop between
// iterations with the given status.
//
// Pipelined steps (RunGraphRequest.after_step_id): Admit decides whether
// such a request may run now. It may when this task's step after_step_id of
// the same graph has ended well; when that step failed, the request fails
// with ABORTED naming it; when that step has not ended (or not arrived), the
// request is queued, without a thread, until Ended releases it or
// TakeQueued removes it (an AbortStep of its step, the graph deregistered,
// shutdown). Each graph remembers its last kRememberedEnds ended steps; a
// step older than all of them counts as ended well. At most
// limits.max_queued_steps requests wait per graph.
//
// Thread-safety: thread-safe. Run may be called concurrently, also for one
// handle; Deregister while a step runs takes effect when the step ends.
#ifndef WEFT_WORKER_GRAPH_MGR_H_
#define WEFT_WORKER_GRAPH_MGR_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/thread_pool.h"
#include "graph/graph.h"
#include "proto/worker_service.pb.h"
#include "runtime/collective_runtime.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/rendezvous.h"
#include "worker/resource_containers.h"

namespace weft {

class TraceRecorder;
namespace worker {

struct GraphMgrLimits {
  // Sessions with at least one graph on this task (--max_sessions).
  int max_sessions = 64;
  // Graphs registered on this task (--max_graphs) and per session
  // (--max_graphs_per_session).
  int max_graphs = 1024;
  int max_graphs_per_session = 256;
  // RunGraph.iterations (--max_iterations): bounds how long one call holds a
  // compute thread.
  int max_iterations = 10000;
  // Bytes a graph's declared shapes may need (0: Tensor::MaxTensorBytes()).
  uint64_t memory_budget = 0;
  // Container stores, one per (container, device), held at once
  // (--max_containers).
  int max_containers = 1024;
  // A step whose last run took less than this may run on the thread that
  // received its RunGraph (RunsInline); 0 runs every step on a compute
  // thread.
  int64_t inline_run_budget_nanos = 200 * 1000;
  // Pipelined RunGraphs waiting for the step before them, per graph
  // (--max_queued_steps).
  int max_queued_steps = 4;
};

// A RunGraph call waiting for the step before it (GraphMgr::Admit).
struct QueuedRun {
  const RunGraphRequest* request = nullptr;
  RunGraphResponse* response = nullptr;
  std::function<void(const absl::Status&)> done;
  std::shared_ptr<Rendezvous> rendezvous;  // the step's, claimed on arrival
  int64_t arrived_ns = 0;                  // absl::GetCurrentTimeNanos()
};

class GraphMgr {
 public:
  static constexpr int kRememberedEnds = 4;
  // `devices` (borrowed, at least one) and `inter_op_pool` (borrowed, may be
  // nullptr: run inline) outlive the GraphMgr. `task` names this task in
  // messages.
  GraphMgr(std::string task, std::vector<Device*> devices, ThreadPool* inter_op_pool,
           CollectiveRuntime* collectives = nullptr, GraphMgrLimits limits = GraphMgrLimits());

  // Every running Run returns `status` after its current iteration, and
  // every later one fails with it. REQUIRES: !status.ok().
  void CancelAll(const absl::Status& status);
  ~GraphMgr();

  // INVALID_ARGUMENT naming the node for a node on another task's device or
  // a graph spanning two devices, and the graph's or executor's errors.
  absl::StatusOr<std::string> Register(const RegisterGraphRequest& request);
  // NOT_FOUND naming the handle when it is not registered in that session
  // (a graph is bound to the session that registered it: another session's
  // handle is as unknown as one never issued).
  absl::Status Deregister(const std::string& session_handle, const std::string& handle);
  // Names of the variables every live session holds on this task, sorted.
  std::vector<std::string> VariableNames() const;

  // A live session's variable store on one device. Holding `resources` keeps
  // the store alive after the session's last graph is deregistered.
  struct SessionResources {
    std::string session_handle;
    std::string device;
    std::shared_ptr<ResourceMgr> resources;
  };
  // The variable stores of the live sessions on this task, sorted by
  // (session, device); only `session_handle`'s when it is given.
  std::vector<SessionResources> ListSessionResources() const;
  std::vector<SessionResources> ListSessionResources(const std::string& session_handle) const;
  // REQUIRES: rendezvous outlives the call.
  absl::Status Run(const RunGraphRequest& request, Rendezvous* rendezvous, RunGraphResponse* response);
  // Whether `request` may run on the thread that received it, one that must
  // not block: its graph only computes (no kernel that waits for a peer, no
  // device work to wait for), its last successful call (feeds decoded and
  // fetches encoded included) took under limits.inline_run_budget_nanos, and
  // it asks for one untraced iteration. A graph's first run is measured on
  // a compute thread. False for a handle that is not registered (Run then
  // reports it).
  bool RunsInline(const RunGraphRequest& request) const;

  // Pipelined steps (see above). Admit: true when `run` may start now;
  // false when it was queued (and moved from); INVALID_ARGUMENT for an
  // after_step_id not below step_id, NOT_FOUND for a graph not registered in
  // the session, RESOURCE_EXHAUSTED when the graph's queue is full, ABORTED
  // when the step before failed here.
  absl::StatusOr<bool> Admit(QueuedRun& run);
  // A step of `request`'s graph ended here with `status`: the queued run it
  // releases, if any, with the status to start it with (OK, or ABORTED when
  // `status` is an error, naming it).
  std::optional<std::pair<QueuedRun, absl::Status>> Ended(const RunGraphRequest& request,
                                                          const absl::Status& status);
  // Removes and returns the queued runs `which` selects, for the caller to
  // fail.
  std::vector<QueuedRun> TakeQueued(const std::function<bool(const RunGraphRequest&)>& which);

  // The task's variable containers, which outlive sessions.
  ResourceContainers& containers() { return containers_; }
  const ResourceContainers& containers() const { return containers_; }

  int NumGraphs() const;
  // Ids of the steps running now, and of those queued (Admit).
  std::vector<int64_t> RunningSteps() const;
  // The kernels running now in this task's steps (Executor::RunningKernels),
  // appended to `out`; a _Recv names the task its tensor comes from.
  void RunningOps(google::protobuf::RepeatedPtrField<RunningOp>* out) const;

  // A RegisterGraph from master incarnation `master_incarnation` (nonzero):
  // when it differs from the last one seen, the graphs registered by other
  // nonzero incarnations belong to a master that died. They are dropped
  // (with their sessions' variables, once no graph of theirs is left) and
  // the ids of their running steps returned, for the caller to abort.
  // 0 changes nothing.
  std::vector<int64_t> AdoptMaster(uint64_t master_incarnation);

 private:
  // A registered graph. Defined here for graph_mgr.cc and graph_mgr_run.cc.
  struct Item {
    std::string handle;
    std::string session_handle;  // the only session that may run or drop it
    std::unique_ptr<Graph> graph;
    std::vector<std::string> feeds;
    std::vector<std::string> fetches;
    // The session's variables on this device; declared before the executor,
    // whose kernels use them.
    std::shared_ptr<ResourceMgr> resources;
    std::string resources_key;
    // The container stores its Variable kernels use; also before the executor.
    std::vector<std::shared_ptr<ResourceMgr>> containers;
    uint64_t master_incarnation = 0;  // of the master that registered it (0: unknown)
    std::unique_ptr<Executor> executor;  // declared after the graph it runs
    // How long the last one-iteration run took, for a graph whose executor
    // cannot wait (-1: none yet, or the executor may wait). RunsInline.
    std::atomic<int64_t> last_run_nanos{-1};
    // The last ended steps, a ring (Admit, Ended); under GraphMgr::mu_.
    std::array<std::pair<int64_t, absl::Status>, kRememberedEnds> ended;
    int ended_count = 0;  // ever recorded
  };
  struct Queued {
    std::shared_ptr<Item> item;  // keeps a deregistered graph's ring alive
    QueuedRun run;
  };

  absl::StatusOr<std::shared_ptr<Item>> Find(const std::string& session_handle, const std::string& handle) const;
  absl::Status NotRegistered(const std::string& session_handle, const std::string& handle) const;
  // RESOURCE_EXHAUSTED when one more graph of `session_handle` would exceed
  // a quota.
  absl::Status CheckQuotasLocked(const std::string& session_handle) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED naming the node when the graph's declared shapes
  // alone exceed the memory budget.
  absl::Status CheckMemory(const Graph& graph) const;

  // Register's steps. The one device of this task that every node of the
  // partition names (the first device when none names one); the _Send
  // nodes' names are appended to `sends`.
  absl::StatusOr<Device*> PartitionDevice(const GraphDef& graph_def, std::vector<std::string>* sends) const;
  // The variable store under `key` ("session@device"), made if new.
  std::shared_ptr<ResourceMgr> SessionResourcesFor(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the store under `key` when only a graph that failed to register
  // holds it besides the map.
  void DropResourcesOfFailedGraph(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Gives `item` (built, with its session) a new handle and adds it, unless
  // a quota was filled meanwhile.
  absl::StatusOr<std::string> AddGraph(std::shared_ptr<Item> item) ABSL_LOCKS_EXCLUDED(mu_);

  // Run's steps. The request's iteration count (0 means 1), within quota
  // and with step ids that do not overflow.
  absl::StatusOr<int> CheckIterations(const RunGraphRequest& request) const;
  // Runs `item`'s executor `iterations` times from step `first_step`,
  // stopping at the first error or at CancelAll; `fetched` holds the last
  // iteration's fetches, float32 scalars averaged over the iterations.
  absl::Status RunIterations(Item& item, const std::vector<Tensor>& feeds, int64_t first_step, int iterations,
                             Rendezvous* rendezvous, std::vector<Tensor>* fetched, TraceRecorder* trace) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string task_;
  const std::vector<Device*> devices_;
  ThreadPool* const inter_op_pool_;
  CollectiveRuntime* const collectives_;
  const std::string handle_prefix_;  // random per GraphMgr
  const GraphMgrLimits limits_;
  std::atomic<bool> cancelled_{false};  // CancelAll was called; then cancel_status_ is set
  ResourceContainers containers_;

  mutable absl::Mutex mu_;
  int64_t next_handle_ ABSL_GUARDED_BY(mu_) = 0;
  // Shared with running steps, which keep a deregistered graph alive.
  absl::flat_hash_map<std::string, std::shared_ptr<Item>> graphs_ ABSL_GUARDED_BY(mu_);
  // "session@device" -> that session's variables; shared by its graphs.
  absl::flat_hash_map<std::string, std::shared_ptr<ResourceMgr>> session_resources_ ABSL_GUARDED_BY(mu_);
  absl::Status cancel_status_ ABSL_GUARDED_BY(mu_);
  uint64_t master_incarnation_ ABSL_GUARDED_BY(mu_) = 0;  // the last nonzero one registering
  // Steps running now: step id -> graph handle.
  std::multimap<int64_t, std::string> running_ ABSL_GUARDED_BY(mu_);
  // Pipelined RunGraphs waiting for the step before them, in arrival order.
  std::vector<Queued> queued_ ABSL_GUARDED_BY(mu_);
};

}  // namespace worker
}  // namespace weft

#endif  // WEFT_WORKER_GRAPH_MGR_H_
