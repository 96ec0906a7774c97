// MasterSession's creation from a probe of the cluster, its graph (Extend,
// the checks of Run's feeds) and its lifetime (Prepare, ForgetTask, Close).
// Plans are built and registered in master_session_plan.cc; steps run and
// are cleaned up in master_session_step.cc.
#include "master/master_session.h"

#include <algorithm>
#include <set>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "graph/device_name.h"
#include "master/master_session_internal.h"

namespace weft {
namespace master {
namespace {

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

// The devices of a session's cluster, from a probe of every task.
struct SessionCluster {
  std::vector<std::string> devices;                // canonical, in task order
  std::map<std::string, std::string> device_task;  // device -> its task
  std::map<std::string, uint64_t> incarnations;    // task -> incarnation
};

absl::StatusOr<SessionCluster> SessionClusterOf(const ClusterProbe& probe) {
  SessionCluster c;
  for (const TaskProbe& t : probe.tasks) {
    RETURN_IF_ERROR(WithTask(t.status, t.task));
    c.incarnations[t.task] = t.response.incarnation();
    for (const DeviceAttributes& d : t.response.device()) {
      auto parsed = DeviceName::Parse(d.name());
      if (!parsed.ok() || !parsed->IsFullySpecified()) {
        return absl::InternalError(
            absl::StrCat("task ", t.task, " reported device '", d.name(), "', which is not a full device name"));
      }
      const std::string name = parsed->ToString();
      if (!c.device_task.emplace(name, t.task).second) {
        return absl::InternalError(absl::StrCat("device ", name, " is reported by two tasks"));
      }
      c.devices.push_back(name);
    }
  }
  if (c.devices.empty()) return absl::FailedPreconditionError("the cluster's tasks report no devices");
  return c;
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
  return CreateFromProbe(std::move(handle), std::move(graph), workers, ProbeCluster(workers), std::move(options));
}

absl::StatusOr<std::unique_ptr<MasterSession>> MasterSession::Create(std::string handle, const GraphDef& graph_def,
                                                                     WorkerCacheInterface* workers,
                                                                     const ClusterProbe& probe,
                                                                     MasterSessionOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, Graph::FromGraphDef(graph_def));
  return CreateFromProbe(std::move(handle), std::move(graph), workers, probe, std::move(options));
}

absl::StatusOr<std::unique_ptr<MasterSession>> MasterSession::CreateFromProbe(std::string handle,
                                                                              std::unique_ptr<Graph> graph,
                                                                              WorkerCacheInterface* workers,
                                                                              const ClusterProbe& probe,
                                                                              MasterSessionOptions options) {
  ASSIGN_OR_RETURN(SessionCluster cluster, SessionClusterOf(probe));
  std::string default_device = options.default_device;
  if (default_device.empty()) {
    default_device = PickDefaultDevice(cluster.devices);
  } else {
    ASSIGN_OR_RETURN(DeviceName d, DeviceName::Parse(default_device));
    default_device = d.ToString();
    if (cluster.device_task.count(default_device) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("default device ", default_device, " is not in the cluster: ",
                                                     absl::StrJoin(cluster.devices, ", ")));
    }
  }
  return std::unique_ptr<MasterSession>(new MasterSession(
      std::move(handle), std::move(graph), workers, std::move(options), std::move(cluster.devices),
      std::move(cluster.device_task), std::move(default_device), std::move(cluster.incarnations)));
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

absl::StatusOr<std::vector<std::string>> MasterSession::AdmitRun(
    const std::vector<std::pair<std::string, Tensor>>& feeds, int iterations) {
  if (iterations < 1) return absl::InvalidArgumentError(absl::StrCat("iterations must be positive, got ", iterations));
  std::shared_ptr<const Graph> graph;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::FailedPreconditionError(absl::StrCat("session ", handle_, " is closed"));
    ++active_runs_;
    graph = graph_;
  }
  std::vector<std::string> feed_names;
  std::set<std::string> seen;
  for (const auto& [name, value] : feeds) {
    absl::Status s = seen.insert(name).second
                         ? CheckFeed(*graph, name, value)
                         : absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' is fed twice"));
    if (!s.ok()) {
      EndRun();
      return s;
    }
    feed_names.push_back(name);
  }
  return feed_names;
}

void MasterSession::EndRun() {
  absl::MutexLock lock(&mu_);
  --active_runs_;
}

absl::Status MasterSession::Run(const std::vector<std::pair<std::string, Tensor>>& feeds,
                                const std::vector<std::string>& fetches, const std::vector<std::string>& targets,
                                std::vector<Tensor>* outputs, int iterations) {
  ASSIGN_OR_RETURN(const std::vector<std::string> feed_names, AdmitRun(feeds, iterations));
  absl::StatusOr<std::shared_ptr<const Plan>> plan = GetPlan(feed_names, fetches, targets);
  if (!plan.ok()) {
    EndRun();
    return plan.status();
  }
  absl::Notification finished;
  absl::Status status;
  StartPlan(*std::move(plan), feeds, iterations, !targets.empty(),
            [&](absl::Status s, std::vector<Tensor> values) {
              status = std::move(s);
              *outputs = std::move(values);
              finished.Notify();
            });
  finished.WaitForNotification();
  return status;
}

bool MasterSession::RunAsync(const std::vector<std::pair<std::string, Tensor>>& feeds,
                             const std::vector<std::string>& fetches, const std::vector<std::string>& targets,
                             int iterations, RunCallback done, bool after_previous) {
  absl::StatusOr<std::vector<std::string>> feed_names = AdmitRun(feeds, iterations);
  if (!feed_names.ok()) {
    done(feed_names.status(), {});
    return true;
  }
  std::shared_ptr<const Plan> plan = BuiltPlan(*feed_names, fetches, targets);
  if (plan == nullptr) {
    EndRun();
    return false;
  }
  StartPlan(std::move(plan), feeds, iterations, !targets.empty(), std::move(done), after_previous);
  return true;
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
