#include "master/master_session.h"

#include <algorithm>
#include <set>

#include "absl/cleanup/cleanup.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/tensor_proto_coding.h"
#include "graph/device_name.h"
#include "graph/fuse_transfers.h"
#include "graph/partition.h"
#include "graph/placer.h"
#include "graph/prune.h"

namespace weft {
namespace master {

// One device's share of a signature, registered with its task.
struct MasterSession::Partition {
  std::string device;
  std::string task;
  WorkerInterface* worker = nullptr;
  GraphDef graph_def;                // released once registered
  std::vector<std::string> feeds;    // `_feed/...` placeholders here
  std::vector<std::string> fetches;  // fetched tensors that live here
  std::vector<std::string> targets;  // targets here, and every _Send
  std::string graph_handle;          // set once registered
};

struct MasterSession::Plan {
  std::vector<Partition> parts;
  std::vector<std::string> tasks;  // distinct tasks of `parts`
  // Per partition: whether it is its task's first, which carries the task's
  // deferred cleanups in RunGraph.
  std::vector<bool> carries_cleanup;
  // Per feed (in the signature's order): the partition that takes it (-1 when
  // nothing needs it) and its registered name. Likewise per fetch.
  std::vector<std::pair<int, std::string>> feed_routes;
  std::vector<std::pair<int, std::string>> fetch_routes;
};

// The first caller of a signature builds the plan; the others wait on `ready`.
struct MasterSession::PlanEntry {
  absl::Notification ready;
  absl::Status status;  // set before `ready`
  std::shared_ptr<const Plan> plan;
};

// One step in flight: its RunGraph calls and the AbortStep calls that a
// failure or AbortRunningSteps sends. Callbacks hold a reference, so the
// state outlives every call it issued.
class MasterSession::Step : public std::enable_shared_from_this<Step> {
 public:
  Step(int64_t step_id, const Plan* plan)
      : step_id_(step_id), plan_(plan), requests_(plan->parts.size()), responses_(plan->parts.size()) {}

  int64_t step_id() const { return step_id_; }
  RunGraphRequest* request(int i) { return &requests_[i]; }
  const RunGraphResponse& response(int i) const { return responses_[i]; }

  void Start(absl::Duration timeout) {
    {
      absl::MutexLock lock(&mu_);
      pending_runs_ = static_cast<int>(plan_->parts.size());
    }
    auto self = shared_from_this();
    for (size_t i = 0; i < plan_->parts.size(); ++i) {
      const Partition& p = plan_->parts[i];
      p.worker->RunGraphAsync(&requests_[i], &responses_[i], timeout,
                              [self, i](const absl::Status& s) { self->RunDone(i, s); });
    }
  }

  // Sends AbortStep(reason) to every task of the step except `except_task`
  // and those already told. Returns at once.
  void Abort(const absl::Status& reason, const std::string& except_task) {
    std::vector<std::pair<WorkerInterface*, Abortion*>> calls;
    {
      absl::MutexLock lock(&mu_);
      for (const Partition& p : plan_->parts) {
        if (p.task == except_task || !aborted_.insert(p.task).second) continue;
        auto a = std::make_unique<Abortion>();
        a->request.set_step_id(step_id_);
        a->request.set_code(static_cast<int>(reason.code()));
        a->request.set_message(std::string(reason.message()));
        a->task = p.task;
        calls.emplace_back(p.worker, a.get());
        abortions_.push_back(std::move(a));
        ++pending_aborts_;
      }
    }
    auto self = shared_from_this();
    for (auto& [worker, a] : calls) {
      worker->AbortStepAsync(&a->request, &a->response, [self, a = a](const absl::Status& s) {
        if (!s.ok()) Logger("master")->debug("AbortStep on {}: {}", a->task, s.ToString());
        absl::MutexLock lock(&self->mu_);
        --self->pending_aborts_;
      });
    }
  }

  void WaitRuns() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(+[](int* n) { return *n == 0; }, &pending_runs_));
  }
  void WaitAborts() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(+[](int* n) { return *n == 0; }, &pending_aborts_));
  }
  // The root cause among the partitions' errors: one that neither an abort
  // nor a failed pull from a peer caused, else the first to arrive.
  absl::Status status() const {
    absl::MutexLock lock(&mu_);
    const absl::Status* best = nullptr;
    int best_rank = 3;
    for (const absl::Status& e : errors_) {
      const int rank = ErrorRank(e);
      if (rank < best_rank) {
        best = &e;
        best_rank = rank;
      }
    }
    return best == nullptr ? absl::OkStatus() : *best;
  }

 private:
  struct Abortion {
    std::string task;
    AbortStepRequest request;
    AbortStepResponse response;
  };

  // 0: a root cause; 1: a _Recv that got a peer's failure; 2: the abort.
  static int ErrorRank(const absl::Status& e) {
    if (e.code() == absl::StatusCode::kAborted || e.code() == absl::StatusCode::kCancelled) return 2;
    if (absl::StrContains(e.message(), "(_Recv): ")) return 1;
    return 0;
  }

  void RunDone(size_t i, const absl::Status& s) {
    const Partition& p = plan_->parts[i];
    absl::Status error;
    {
      absl::MutexLock lock(&mu_);
      if (!s.ok()) {
        errors_.push_back(WithTask(s, p.task));
        if (errors_.size() == 1) error = errors_.back();
      }
      --pending_runs_;
    }
    // The step cannot finish on the other tasks: their _Recv nodes may wait
    // for tensors this partition will never send.
    if (!error.ok()) Abort(error, p.task);
  }

  const int64_t step_id_;
  const Plan* const plan_;  // outlives the step: Run holds the plan
  std::vector<RunGraphRequest> requests_;
  std::vector<RunGraphResponse> responses_;
  mutable absl::Mutex mu_;
  int pending_runs_ ABSL_GUARDED_BY(mu_) = 0;
  int pending_aborts_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<absl::Status> errors_ ABSL_GUARDED_BY(mu_);  // in arrival order
  std::set<std::string> aborted_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Abortion>> abortions_ ABSL_GUARDED_BY(mu_);
};

namespace {

std::string SignatureKey(const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
                         const std::vector<std::string>& targets) {
  return absl::StrCat(absl::StrJoin(feeds, "\x01"), "\x02", absl::StrJoin(fetches, "\x01"), "\x02",
                      absl::StrJoin(targets, "\x01"));
}

std::string PickDefaultDevice(const std::vector<std::string>& devices) {
  const std::string preferred = "/job:worker/task:0/device:CPU:0";
  for (const std::string& d : devices) {
    if (d == preferred) return d;
  }
  for (const std::string& d : devices) {
    auto parsed = DeviceName::Parse(d);
    if (parsed.ok() && parsed->job == "worker") return d;
  }
  return devices.front();
}

// A feed the graph's tensor `name` can take, said in the caller's names
// before any task sees it: the task would name its own placeholder.
absl::Status CheckFeed(const Graph& graph, const std::string& name, const Tensor& value) {
  absl::StatusOr<Endpoint> e = graph.FindEndpoint(name);
  if (!e.ok()) {
    // The graph's message may start by naming the tensor already.
    const std::string quoted = absl::StrCat("'", name, "'");
    return absl::InvalidArgumentError(absl::StartsWith(e.status().message(), quoted)
                                          ? absl::StrCat("feed ", e.status().message())
                                          : absl::StrCat("feed ", quoted, ": ", e.status().message()));
  }
  const DType want = e->node->output_type(e->index);
  const TensorShape& shape = e->node->output_shape(e->index);
  if (value.IsInitialized() && value.dtype() == want && shape.IsCompatibleWith(value.shape())) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "feed '", name, "' must be ", DTypeName(want), shape.DebugString(), ", got ",
      value.IsInitialized() ? absl::StrCat(DTypeName(value.dtype()), value.shape().DebugString())
                            : std::string("an uninitialized tensor")));
}

}  // namespace

uint64_t MasterIncarnation() {
  static const uint64_t incarnation = absl::Uniform<uint64_t>(absl::BitGen(), 1, ~uint64_t{0});
  return incarnation;
}

absl::StatusOr<std::unique_ptr<MasterSession>> MasterSession::Create(std::string handle, const GraphDef& graph_def,
                                                                     WorkerCacheInterface* workers,
                                                                     MasterSessionOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, Graph::FromGraphDef(graph_def));
  // Devices and their tasks, asking every task in parallel.
  const std::vector<std::string> tasks = workers->ListTasks();
  std::vector<GetStatusRequest> requests(tasks.size());
  std::vector<GetStatusResponse> responses(tasks.size());
  std::vector<absl::Status> statuses(tasks.size());
  absl::BlockingCounter pending(static_cast<int>(tasks.size()));
  for (size_t i = 0; i < tasks.size(); ++i) {
    WorkerInterface* w = workers->GetOrCreateWorker(tasks[i]);
    if (w == nullptr) {
      statuses[i] = absl::NotFoundError("the worker cache has no client for the task");
      pending.DecrementCount();
      continue;
    }
    w->GetStatusAsync(&requests[i], &responses[i], [&, i](const absl::Status& s) {
      statuses[i] = s;
      pending.DecrementCount();
    });
  }
  pending.Wait();
  std::vector<std::string> devices;
  std::map<std::string, std::string> device_task;
  std::map<std::string, uint64_t> incarnations;
  for (size_t i = 0; i < tasks.size(); ++i) {
    RETURN_IF_ERROR(WithTask(statuses[i], tasks[i]));
    incarnations[tasks[i]] = responses[i].incarnation();
    for (const DeviceAttributes& d : responses[i].device()) {
      auto parsed = DeviceName::Parse(d.name());
      if (!parsed.ok() || !parsed->IsFullySpecified()) {
        return absl::InternalError(
            absl::StrCat("task ", tasks[i], " reported device '", d.name(), "', which is not a full device name"));
      }
      const std::string name = parsed->ToString();
      if (!device_task.emplace(name, tasks[i]).second) {
        return absl::InternalError(absl::StrCat("device ", name, " is reported by two tasks"));
      }
      devices.push_back(name);
    }
  }
  if (devices.empty()) return absl::FailedPreconditionError("the cluster's tasks report no devices");
  std::string default_device = options.default_device;
  if (default_device.empty()) {
    default_device = PickDefaultDevice(devices);
  } else {
    ASSIGN_OR_RETURN(DeviceName d, DeviceName::Parse(default_device));
    default_device = d.ToString();
    if (device_task.count(default_device) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("default device ", default_device, " is not in the cluster: ", absl::StrJoin(devices, ", ")));
    }
  }
  return std::unique_ptr<MasterSession>(new MasterSession(std::move(handle), std::move(graph), workers,
                                                          std::move(options), std::move(devices),
                                                          std::move(device_task), std::move(default_device),
                                                          std::move(incarnations)));
}

MasterSession::MasterSession(std::string handle, std::unique_ptr<Graph> graph, WorkerCacheInterface* workers,
                             MasterSessionOptions options, std::vector<std::string> devices,
                             std::map<std::string, std::string> device_task, std::string default_device,
                             std::map<std::string, uint64_t> task_incarnations)
    : handle_(std::move(handle)),
      workers_(workers),
      options_(std::move(options)),
      devices_(std::move(devices)),
      device_task_(std::move(device_task)),
      default_device_(std::move(default_device)),
      task_incarnations_(std::move(task_incarnations)),
      // 2^62 leaves room for the counter and for steps_per_execution's
      // consecutive ids without wrapping past the int64 range.
      step_id_base_(absl::Uniform<uint64_t>(absl::BitGen(), 1, uint64_t{1} << 62)),
      graph_(std::move(graph)) {}

MasterSession::~MasterSession() {
  absl::Status s = Close();
  if (!s.ok()) Logger("master")->warn("closing session {}: {}", handle_, s.ToString());
}

int MasterSession::num_signatures() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(plans_.size());
}

absl::Status MasterSession::Extend(const GraphDef& graph_def) {
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::FailedPreconditionError(absl::StrCat("session ", handle_, " is closed"));
  GraphDef merged = graph_->ToGraphDef();
  for (const NodeDef& n : graph_def.node()) {
    if (graph_->FindNode(n.name()) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("node '", n.name(), "' is already in the session's graph; Extend only adds nodes"));
    }
    *merged.add_node() = n;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, Graph::FromGraphDef(merged));
  graph_ = std::move(g);
  return absl::OkStatus();
}

absl::Status MasterSession::Run(const std::vector<std::pair<std::string, Tensor>>& feeds,
                                const std::vector<std::string>& fetches, const std::vector<std::string>& targets,
                                std::vector<Tensor>* outputs, int iterations) {
  if (iterations < 1) return absl::InvalidArgumentError(absl::StrCat("iterations must be positive, got ", iterations));
  std::shared_ptr<const Graph> graph;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::FailedPreconditionError(absl::StrCat("session ", handle_, " is closed"));
    ++active_runs_;
    graph = graph_;
  }
  absl::Cleanup done = [this] {
    absl::MutexLock lock(&mu_);
    --active_runs_;
  };
  std::vector<std::string> feed_names;
  std::set<std::string> seen;
  for (const auto& [name, value] : feeds) {
    if (!seen.insert(name).second) return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' is fed twice"));
    RETURN_IF_ERROR(CheckFeed(*graph, name, value));
    feed_names.push_back(name);
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, GetPlan(feed_names, fetches, targets));
  return RunPlan(*plan, feeds, outputs, iterations);
}

absl::StatusOr<std::shared_ptr<const MasterSession::Plan>> MasterSession::GetPlan(
    const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets) {
  const std::string key = SignatureKey(feeds, fetches, targets);
  std::shared_ptr<PlanEntry> entry;
  std::shared_ptr<const Graph> graph;
  {
    absl::MutexLock lock(&mu_);
    auto it = plans_.find(key);
    if (it != plans_.end()) {
      entry = it->second;
    } else {
      entry = std::make_shared<PlanEntry>();
      plans_.emplace(key, entry);
      graph = graph_;
    }
  }
  if (graph == nullptr) {  // another caller builds it
    entry->ready.WaitForNotification();
    if (!entry->status.ok()) return entry->status;
    return entry->plan;
  }
  absl::StatusOr<std::shared_ptr<Plan>> plan = BuildPlan(*graph, feeds, fetches, targets);
  if (plan.ok()) {
    absl::Status s = Register(plan->get());
    if (!s.ok()) plan = s;
  }
  if (plan.ok()) {
    entry->plan = *std::move(plan);
  } else {
    entry->status = plan.status();
    absl::MutexLock lock(&mu_);
    plans_.erase(key);  // a later call may succeed (e.g. after Extend)
  }
  entry->ready.Notify();
  if (!entry->status.ok()) return entry->status;
  return entry->plan;
}

absl::StatusOr<std::shared_ptr<MasterSession::Plan>> MasterSession::BuildPlan(
    const Graph& graph, const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets) {
  std::unique_ptr<Graph> pruned;
  RETURN_IF_ERROR(PruneGraph(graph, feeds, fetches, targets, &pruned));
  RETURN_IF_ERROR(PlaceGraph(pruned.get(), devices_, default_device_));
  ASSIGN_OR_RETURN(auto parts, PartitionGraph(*pruned));
  // One message per (task pair, point of the step) instead of one RPC per
  // tensor: see graph/fuse_transfers.h.
  RETURN_IF_ERROR(FuseCrossTaskTransfers(*pruned, &parts).status());

  auto plan = std::make_shared<Plan>();
  std::map<std::string, int> part_of_device;
  for (auto& [device, def] : parts) {
    Partition p;
    p.device = device;
    p.task = device_task_.at(device);  // placement only uses devices_
    p.worker = workers_->GetOrCreateWorker(p.task);
    if (p.worker == nullptr) return absl::InternalError(absl::StrCat("no client for task ", p.task));
    for (const NodeDef& n : def.node()) {
      if (n.op() == "_Send") p.targets.push_back(n.name());
    }
    p.graph_def = std::move(def);
    part_of_device[device] = static_cast<int>(plan->parts.size());
    plan->parts.push_back(std::move(p));
  }
  auto part_of_node = [&](const std::string& node) -> int {
    const Node* n = pruned->FindNode(node);
    return n == nullptr ? -1 : part_of_device.at(n->assigned_device());
  };
  auto add_unique = [](std::vector<std::string>* v, const std::string& s) {
    if (std::find(v->begin(), v->end(), s) == v->end()) v->push_back(s);
  };

  std::set<std::string> fed;  // canonical tensor names
  for (const std::string& f : feeds) {
    ASSIGN_OR_RETURN(Endpoint e, graph.FindEndpoint(f));
    fed.insert(TensorName(e));
  }
  for (const std::string& f : fetches) {
    ASSIGN_OR_RETURN(Endpoint e, graph.FindEndpoint(f));
    std::string name = fed.count(TensorName(e)) > 0 ? FeedNodeName(f) : f;
    std::string node;
    int index = 0;
    RETURN_IF_ERROR(ParseTensorName(name, &node, &index));
    const int p = part_of_node(node);
    if (p < 0) return absl::InternalError(absl::StrCat("fetch '", f, "' was pruned away"));
    add_unique(&plan->parts[p].fetches, name);
    plan->fetch_routes.emplace_back(p, name);
  }
  for (const std::string& t : targets) {
    const int p = part_of_node(t);
    if (p < 0) return absl::InternalError(absl::StrCat("target '", t, "' was pruned away"));
    add_unique(&plan->parts[p].targets, t);
  }
  // A partition with nothing to fetch, run or send does no useful work
  // (only an unused feed's placeholder lands in one); leave it out.
  std::vector<int> new_index(plan->parts.size(), -1);
  std::vector<Partition> kept;
  for (size_t i = 0; i < plan->parts.size(); ++i) {
    Partition& p = plan->parts[i];
    if (p.fetches.empty() && p.targets.empty()) continue;
    new_index[i] = static_cast<int>(kept.size());
    kept.push_back(std::move(p));
  }
  plan->parts = std::move(kept);
  for (auto& route : plan->fetch_routes) route.first = new_index[route.first];
  // A feed nothing reads or fetches is not sent anywhere.
  std::set<std::string> fetched;
  for (const auto& route : plan->fetch_routes) fetched.insert(route.second);
  for (const std::string& f : feeds) {
    const std::string name = FeedNodeName(f);
    const Node* n = pruned->FindNode(name);
    const bool used = n != nullptr && (!n->out_edges().empty() || !n->control_outputs().empty() ||
                                       fetched.count(name) > 0);
    const int old = used ? part_of_node(name) : -1;
    const int p = old < 0 ? -1 : new_index[old];
    if (p >= 0) add_unique(&plan->parts[p].feeds, name);
    plan->feed_routes.emplace_back(p, name);
  }
  std::set<std::string> tasks;
  for (const Partition& p : plan->parts) {
    const bool first = tasks.insert(p.task).second;
    if (first) plan->tasks.push_back(p.task);
    plan->carries_cleanup.push_back(first);
  }
  return plan;
}

absl::Status MasterSession::Register(Plan* plan) {
  const size_t n = plan->parts.size();
  std::vector<RegisterGraphRequest> requests(n);
  std::vector<RegisterGraphResponse> responses(n);
  std::vector<absl::Status> statuses(n);
  // Every task learns its peers' addresses from the master, before its
  // graph can pull from them (tasks started on port 0 know no others).
  const ClusterDef cluster = workers_->cluster();
  for (size_t i = 0; i < n; ++i) {
    Partition& p = plan->parts[i];
    RegisterGraphRequest& r = requests[i];
    r.set_session_handle(handle_);
    r.set_master_incarnation(options_.master_incarnation);
    if (cluster.job_size() > 0) *r.mutable_cluster() = cluster;
    *r.mutable_graph_def() = std::move(p.graph_def);
    for (const std::string& f : p.feeds) r.add_feed(f);
    for (const std::string& f : p.fetches) r.add_fetch(f);
    for (const std::string& t : p.targets) r.add_target(t);
    p.graph_def.Clear();
  }
  absl::BlockingCounter pending(static_cast<int>(n));
  for (size_t i = 0; i < n; ++i) {
    plan->parts[i].worker->RegisterGraphAsync(&requests[i], &responses[i], [&, i](const absl::Status& s) {
      statuses[i] = s;
      pending.DecrementCount();
    });
  }
  pending.Wait();
  absl::Status first;
  for (size_t i = 0; i < n; ++i) {
    if (statuses[i].ok()) {
      plan->parts[i].graph_handle = responses[i].graph_handle();
    } else if (first.ok()) {
      first = WithTask(statuses[i], plan->parts[i].task);
    }
  }
  if (!first.ok()) {
    Deregister(*plan).IgnoreError();  // best effort: `first` says what went wrong
    return first;
  }
  Logger("master")->debug("session {}: registered {} partition(s) on {}", handle_, n,
                          absl::StrJoin(plan->tasks, ", "));
  return absl::OkStatus();
}

absl::Status MasterSession::Deregister(const Plan& plan) {
  std::vector<int> registered;
  for (size_t i = 0; i < plan.parts.size(); ++i) {
    if (!plan.parts[i].graph_handle.empty()) registered.push_back(static_cast<int>(i));
  }
  std::vector<DeregisterGraphRequest> requests(registered.size());
  std::vector<DeregisterGraphResponse> responses(registered.size());
  std::vector<absl::Status> statuses(registered.size());
  absl::BlockingCounter pending(static_cast<int>(registered.size()));
  for (size_t k = 0; k < registered.size(); ++k) {
    const Partition& p = plan.parts[registered[k]];
    requests[k].set_session_handle(handle_);
    requests[k].set_graph_handle(p.graph_handle);
    p.worker->DeregisterGraphAsync(&requests[k], &responses[k], [&, k](const absl::Status& s) {
      statuses[k] = s;
      pending.DecrementCount();
    });
  }
  pending.Wait();
  for (size_t k = 0; k < registered.size(); ++k) {
    RETURN_IF_ERROR(WithTask(statuses[k], plan.parts[registered[k]].task));
  }
  return absl::OkStatus();
}

absl::Status MasterSession::RunPlan(const Plan& plan, const std::vector<std::pair<std::string, Tensor>>& feeds,
                                    std::vector<Tensor>* outputs, int iterations) {
  // Iteration i of the run uses step id step_id + i on every task.
  const int64_t step_id = static_cast<int64_t>(step_id_base_ + step_counter_.fetch_add(iterations));
  auto step = std::make_shared<Step>(step_id, &plan);
  for (size_t i = 0; i < plan.parts.size(); ++i) {
    RunGraphRequest* r = step->request(static_cast<int>(i));
    r->set_session_handle(handle_);
    r->set_graph_handle(plan.parts[i].graph_handle);
    r->set_step_id(step_id);
    r->set_iterations(iterations);
    for (const std::string& f : plan.parts[i].fetches) r->add_recv_key(f);
    if (plan.carries_cleanup[i]) {
      for (int64_t id : TakeDeferredCleanup(plan.parts[i].task)) r->add_cleanup_step_id(id);
    }
  }
  for (size_t k = 0; k < feeds.size(); ++k) {
    const auto& [part, name] = plan.feed_routes[k];
    if (part < 0) continue;
    NamedTensorProto* send = step->request(part)->add_send();
    send->set_name(name);
    TensorToProto(feeds[k].second, send->mutable_tensor());
  }
  {
    absl::MutexLock lock(&mu_);
    running_.emplace(step_id, step);
  }
  step->Start(options_.step_timeout);
  step->WaitRuns();
  {
    absl::MutexLock lock(&mu_);
    running_.erase(step_id);
  }
  // No AbortStep can start now; wait for those under way so none reaches a
  // task after its CleanupStep.
  step->WaitAborts();
  DeferCleanup(plan, step_id);
  RETURN_IF_ERROR(step->status());

  outputs->clear();
  for (size_t k = 0; k < plan.fetch_routes.size(); ++k) {
    const auto& [part, name] = plan.fetch_routes[k];
    const RunGraphResponse& resp = step->response(part);
    const NamedTensorProto* found = nullptr;
    for (const NamedTensorProto& t : resp.recv()) {
      if (t.name() == name) found = &t;
    }
    if (found == nullptr) {
      return absl::InternalError(
          absl::StrCat("task ", plan.parts[part].task, " returned no value for fetch '", name, "'"));
    }
    auto t = TensorFromProto(found->tensor());
    if (!t.ok()) return WithTask(Annotate(t.status(), absl::StrCat("fetch '", name, "'")), plan.parts[part].task);
    outputs->push_back(*std::move(t));
  }
  return absl::OkStatus();
}

void MasterSession::DeferCleanup(const Plan& plan, int64_t step_id) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> flush;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& task : plan.tasks) {
      std::vector<int64_t>& ids = deferred_cleanup_[task];
      ids.push_back(step_id);
      // A task that this session's recent steps leave out is told directly.
      if (ids.size() >= kMaxDeferredCleanups) flush.emplace_back(task, std::move(ids));
    }
    for (const auto& [task, ids] : flush) deferred_cleanup_.erase(task);
  }
  for (auto& [task, ids] : flush) SendCleanup(task, std::move(ids));
}

std::vector<int64_t> MasterSession::TakeDeferredCleanup(const std::string& task) {
  absl::MutexLock lock(&mu_);
  auto it = deferred_cleanup_.find(task);
  if (it == deferred_cleanup_.end()) return {};
  std::vector<int64_t> ids = std::move(it->second);
  deferred_cleanup_.erase(it);
  return ids;
}

void MasterSession::SendCleanup(const std::string& task, std::vector<int64_t> step_ids) {
  if (step_ids.empty()) return;
  // Fire and forget: no step's result depends on it. Close waits for the
  // calls still under way, so none outlives the session's workers.
  struct Call {
    CleanupStepRequest request;
    CleanupStepResponse response;
  };
  auto call = std::make_shared<Call>();
  call->request.set_step_id(step_ids[0]);
  for (size_t i = 1; i < step_ids.size(); ++i) call->request.add_more_step_id(step_ids[i]);
  {
    absl::MutexLock lock(&mu_);
    ++pending_cleanups_;
  }
  WorkerInterface* w = workers_->GetOrCreateWorker(task);
  w->CleanupStepAsync(&call->request, &call->response, [this, call, task](const absl::Status& s) {
    if (!s.ok()) Logger("master")->warn("CleanupStep {} on {}: {}", call->request.step_id(), task, s.ToString());
    absl::MutexLock lock(&mu_);
    --pending_cleanups_;
  });
}

void MasterSession::AbortRunningSteps(const absl::Status& reason) {
  absl::MutexLock lock(&mu_);
  // Abort only issues asynchronous calls, so holding mu_ is brief; it keeps
  // a step from leaving running_ (and cleaning up) between the two.
  for (auto& [id, step] : running_) step->Abort(reason, "");
}

absl::Status MasterSession::Prepare(const std::vector<std::string>& fetches, const std::vector<std::string>& targets) {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::FailedPreconditionError(absl::StrCat("session ", handle_, " is closed"));
  }
  return GetPlan({}, fetches, targets).status();
}

void MasterSession::ForgetTask(const std::string& task) {
  std::vector<std::shared_ptr<const Plan>> dropped;
  {
    absl::MutexLock lock(&mu_);
    deferred_cleanup_.erase(task);
    for (auto it = plans_.begin(); it != plans_.end();) {
      const std::shared_ptr<PlanEntry>& entry = it->second;
      // A plan still being built is left to its builder.
      const bool touches = entry->ready.HasBeenNotified() && entry->plan != nullptr &&
                           std::find(entry->plan->tasks.begin(), entry->plan->tasks.end(), task) !=
                               entry->plan->tasks.end();
      if (!touches) {
        ++it;
        continue;
      }
      dropped.push_back(entry->plan);
      plans_.erase(it++);
    }
  }
  for (const auto& plan : dropped) {
    // The restarted task no longer knows its handles; the others release
    // theirs. Failures only leave a graph behind until the session closes.
    Plan others;
    for (const Partition& p : plan->parts) {
      if (p.task != task) others.parts.push_back(p);
    }
    absl::Status s = Deregister(others);
    if (!s.ok()) Logger("master")->debug("session {}: releasing a plan after {} restarted: {}", handle_, task, s.ToString());
  }
  Logger("master")->info("session {}: {} restarted; {} plan(s) will register again", handle_, task, dropped.size());
}

absl::Status MasterSession::Close() {
  absl::flat_hash_map<std::string, std::shared_ptr<PlanEntry>> plans;
  absl::flat_hash_map<std::string, std::vector<int64_t>> deferred;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::OkStatus();
    closed_ = true;
    mu_.Await(absl::Condition(+[](int* n) { return *n == 0; }, &active_runs_));
    plans.swap(plans_);
    deferred.swap(deferred_cleanup_);
  }
  for (auto& [task, ids] : deferred) SendCleanup(task, std::move(ids));
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(+[](int* n) { return *n == 0; }, &pending_cleanups_));
  }
  absl::Status first;
  for (auto& [key, entry] : plans) {
    if (entry->plan == nullptr) continue;
    absl::Status s = Deregister(*entry->plan);
    if (first.ok()) first = s;
  }
  return first;
}

}  // namespace master
}  // namespace weft
