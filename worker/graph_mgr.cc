#include "worker/graph_mgr.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "graph/device_name.h"
#include "graph/graph.h"
#include "runtime/executor.h"

namespace weft {
namespace worker {

GraphMgr::GraphMgr(std::string task, std::vector<Device*> devices, ThreadPool* inter_op_pool,
                   CollectiveRuntime* collectives, GraphMgrLimits limits)
    : task_(std::move(task)),
      devices_(std::move(devices)),
      inter_op_pool_(inter_op_pool),
      collectives_(collectives),
      // A restarted task must not accept a handle from its previous life.
      handle_prefix_(absl::StrCat("g", absl::Hex(absl::Uniform<uint32_t>(absl::BitGen())), "_")),
      limits_(limits),
      containers_(task_, limits.max_containers) {}

void GraphMgr::CancelAll(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (cancel_status_.ok()) cancel_status_ = status.ok() ? absl::CancelledError("steps cancelled") : status;
  cancelled_.store(true, std::memory_order_release);
}

absl::Status GraphMgr::CheckQuotasLocked(const std::string& session_handle) const {
  if (static_cast<int64_t>(graphs_.size()) >= limits_.max_graphs) {
    return absl::ResourceExhaustedError(absl::StrCat("task ", task_, " already holds ", graphs_.size(),
                                                     " graphs, its quota (--max_graphs=", limits_.max_graphs,
                                                     "); deregister graphs or raise the quota"));
  }
  int in_session = 0;
  absl::flat_hash_map<absl::string_view, bool> sessions;
  for (const auto& [h, item] : graphs_) {
    sessions.try_emplace(item->session_handle, true);
    if (item->session_handle == session_handle) ++in_session;
  }
  if (in_session >= limits_.max_graphs_per_session) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "session '", session_handle, "' already has ", in_session, " graphs on task ", task_,
        ", its quota (--max_graphs_per_session=", limits_.max_graphs_per_session, ")"));
  }
  if (in_session == 0 && static_cast<int64_t>(sessions.size()) >= limits_.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrCat("task ", task_, " already serves ", sessions.size(),
                                                     " sessions, its quota (--max_sessions=", limits_.max_sessions,
                                                     "); session '", session_handle, "' cannot start here"));
  }
  return absl::OkStatus();
}

absl::Status GraphMgr::CheckMemory(const Graph& graph) const {
  const uint64_t budget = limits_.memory_budget != 0 ? limits_.memory_budget : Tensor::MaxTensorBytes();
  uint64_t variable_bytes = 0;
  for (const auto& node : graph.nodes()) {
    if (node == nullptr) continue;
    for (int i = 0; i < node->num_outputs(); ++i) {
      const TensorShape& shape = node->output_shape(i);
      if (!shape.IsFullyDefined()) continue;
      // Overflow-checked: the dims come from the request.
      uint64_t bytes = DTypeSize(node->output_type(i));
      bool fits = true;
      for (int64_t d : shape.dims()) {
        fits = fits && d >= 0 && !__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes);
      }
      if (!fits || bytes > budget) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "node '", node->name(), "' (", node->op(), ") output ", i, " ", DTypeName(node->output_type(i)),
            shape.DebugString(), " needs ", fits ? absl::StrCat(bytes) : std::string("more than 2^64"),
            " bytes, more than task ", task_, "'s memory budget of ", budget, " bytes (--memory_limit)"));
      }
      if (node->op() == "Variable" && (__builtin_add_overflow(variable_bytes, bytes, &variable_bytes) ||
                                       variable_bytes > budget)) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "the variables of this graph need more than task ", task_, "'s memory budget of ", budget,
            " bytes (--memory_limit); the budget ran out at variable '", node->name(), "' ",
            DTypeName(node->output_type(i)), shape.DebugString()));
      }
    }
  }
  return absl::OkStatus();
}

GraphMgr::~GraphMgr() = default;

absl::StatusOr<Device*> GraphMgr::PartitionDevice(const GraphDef& graph_def, std::vector<std::string>* sends) const {
  // The device: the one every node names (a partition holds one device).
  Device* device = nullptr;
  const NodeDef* first = nullptr;
  for (const NodeDef& node : graph_def.node()) {
    if (node.op() == "_Send") sends->push_back(node.name());
    Device* d = devices_.front();
    if (!node.device().empty()) {
      auto want = DeviceName::Parse(node.device());
      if (!want.ok()) return Annotate(want.status(), absl::StrCat("node '", node.name(), "'"));
      d = nullptr;
      for (Device* candidate : devices_) {
        if (DeviceName::IsCompatible(*want, *DeviceName::Parse(candidate->name()))) {
          d = candidate;
          break;
        }
      }
      if (d == nullptr) {
        std::vector<std::string> names;
        for (Device* c : devices_) names.push_back(c->name());
        return absl::InvalidArgumentError(absl::StrCat("node '", node.name(), "' is assigned to ", node.device(),
                                                       ", which is not a device of task ", task_, " (",
                                                       absl::StrJoin(names, ", "), ")"));
      }
    }
    if (device != nullptr && d != device) {
      return absl::InvalidArgumentError(absl::StrCat("nodes '", first->name(), "' and '", node.name(),
                                                     "' are on different devices (", device->name(), ", ",
                                                     d->name(), "): register one partition per device"));
    }
    device = d;
    if (first == nullptr) first = &node;
  }
  return device != nullptr ? device : devices_.front();
}

std::shared_ptr<ResourceMgr> GraphMgr::SessionResourcesFor(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto& slot = session_resources_[key];
  if (slot == nullptr) slot = std::make_shared<ResourceMgr>();
  return slot;
}

void GraphMgr::DropResourcesOfFailedGraph(const std::string& key) {
  absl::MutexLock lock(&mu_);
  // Two owners, the map and the failed graph: no other graph uses the store.
  auto res = session_resources_.find(key);
  if (res != session_resources_.end() && res->second.use_count() == 2) session_resources_.erase(res);
}

absl::StatusOr<std::string> GraphMgr::Register(const RegisterGraphRequest& request) {
  std::vector<std::string> sends;
  ASSIGN_OR_RETURN(Device * device, PartitionDevice(request.graph_def(), &sends));
  {
    // Early, before the graph is built; checked again when it is added.
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckQuotasLocked(request.session_handle()));
  }

  auto item = std::make_shared<Item>();
  ASSIGN_OR_RETURN(item->graph, Graph::FromGraphDef(request.graph_def()));
  RETURN_IF_ERROR(CheckMemory(*item->graph));
  ExecutorOptions opts;
  opts.feeds.assign(request.feed().begin(), request.feed().end());
  opts.fetches.assign(request.fetch().begin(), request.fetch().end());
  opts.targets.assign(request.target().begin(), request.target().end());
  // Every _Send runs: a peer's partition waits for its value even when
  // nothing here needs it.
  for (std::string& send : sends) {
    if (std::find(opts.targets.begin(), opts.targets.end(), send) == opts.targets.end()) {
      opts.targets.push_back(std::move(send));
    }
  }
  opts.inter_op_pool = inter_op_pool_;
  opts.collectives = collectives_;
  // Each session keeps its own variables, so a second job on the same task
  // starts from its own initial values, not from the first job's weights.
  item->resources_key = absl::StrCat(request.session_handle(), "@", device->name());
  item->resources = SessionResourcesFor(item->resources_key);
  opts.resources = item->resources.get();
  // Resolved while the kernels are built; the graph keeps what it resolved.
  opts.containers = [this, holder = item.get(), device](const std::string& container) -> absl::StatusOr<ResourceMgr*> {
    ASSIGN_OR_RETURN(std::shared_ptr<ResourceMgr> store, containers_.Get(container, device->name()));
    holder->containers.push_back(store);
    return store.get();
  };
  item->feeds = opts.feeds;
  item->fetches = opts.fetches;
  // On failure from here on, a variable store made for this graph alone
  // must not outlive it.
  auto executor = Executor::Create(item->graph.get(), device, std::move(opts));
  if (!executor.ok()) {
    DropResourcesOfFailedGraph(item->resources_key);
    return executor.status();
  }
  item->executor = *std::move(executor);
  item->master_incarnation = request.master_incarnation();
  item->session_handle = request.session_handle();
  return AddGraph(std::move(item));
}

absl::StatusOr<std::string> GraphMgr::AddGraph(std::shared_ptr<Item> item) {
  // 128 random bits after the per-process prefix: a handle cannot be
  // guessed from another one.
  absl::BitGen gen;
  const std::string secret =
      absl::StrCat(absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16),
                   absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16));
  std::string handle;
  absl::Status quota;
  {
    absl::MutexLock lock(&mu_);
    // Checked again in the lock that adds it: the early check raced other
    // registrations.
    quota = CheckQuotasLocked(item->session_handle);
    if (quota.ok()) {
      item->handle = absl::StrCat(handle_prefix_, next_handle_++, "_", secret);
      handle = item->handle;
      graphs_.emplace(handle, std::move(item));
    }
  }
  if (!quota.ok()) {
    item->executor.reset();
    DropResourcesOfFailedGraph(item->resources_key);
    return quota;
  }
  return handle;
}

std::vector<int64_t> GraphMgr::AdoptMaster(uint64_t master_incarnation) {
  std::vector<int64_t> orphaned;
  std::vector<std::shared_ptr<Item>> dropped;  // released outside the lock
  if (master_incarnation == 0) return orphaned;
  absl::MutexLock lock(&mu_);
  if (master_incarnation == master_incarnation_) return orphaned;
  master_incarnation_ = master_incarnation;
  for (auto it = graphs_.begin(); it != graphs_.end();) {
    const Item& item = *it->second;
    if (item.master_incarnation == 0 || item.master_incarnation == master_incarnation) {
      ++it;
      continue;
    }
    const std::string key = item.resources_key;
    dropped.push_back(std::move(it->second));
    graphs_.erase(it++);
    auto res = session_resources_.find(key);
    if (res != session_resources_.end()) {
      bool shared = false;
      for (const auto& [h, other] : graphs_) shared = shared || other->resources_key == key;
      if (!shared) session_resources_.erase(res);
    }
  }
  for (const auto& [step, handle] : running_) {
    for (const auto& d : dropped) {
      if (d->handle == handle) orphaned.push_back(step);
    }
  }
  for (const Queued& q : queued_) {
    if (std::find(dropped.begin(), dropped.end(), q.item) != dropped.end()) {
      orphaned.push_back(q.run.request->step_id());
    }
  }
  return orphaned;
}

absl::Status GraphMgr::Deregister(const std::string& session_handle, const std::string& handle) {
  std::shared_ptr<Item> item;  // released outside the lock
  {
    absl::MutexLock lock(&mu_);
    auto it = graphs_.find(handle);
    if (it == graphs_.end() || it->second->session_handle != session_handle) {
      return NotRegistered(session_handle, handle);
    }
    item = std::move(it->second);
    graphs_.erase(it);
    // The session's last graph on this device takes its variables along.
    auto res = session_resources_.find(item->resources_key);
    if (res != session_resources_.end() && res->second.use_count() == 2) session_resources_.erase(res);
  }
  return absl::OkStatus();
}

std::vector<std::string> GraphMgr::VariableNames() const {
  std::vector<std::string> names;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, res] : session_resources_) {
    for (std::string& n : res->VariableNames()) names.push_back(std::move(n));
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::vector<GraphMgr::SessionResources> GraphMgr::ListSessionResources() const {
  std::vector<SessionResources> out;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, res] : session_resources_) {
      // The key is "session@device"; a device name has no '@'.
      const size_t at = key.rfind('@');
      out.push_back(SessionResources{key.substr(0, at), key.substr(at + 1), res});
    }
  }
  std::sort(out.begin(), out.end(), [](const SessionResources& a, const SessionResources& b) {
    return std::tie(a.session_handle, a.device) < std::tie(b.session_handle, b.device);
  });
  return out;
}

std::vector<GraphMgr::SessionResources> GraphMgr::ListSessionResources(const std::string& session_handle) const {
  std::vector<SessionResources> all = ListSessionResources();
  all.erase(std::remove_if(all.begin(), all.end(),
                           [&](const SessionResources& r) { return r.session_handle != session_handle; }),
            all.end());
  return all;
}

absl::Status GraphMgr::NotRegistered(const std::string& session_handle, const std::string& handle) const {
  // The same answer whether the handle is unknown or another session's: a
  // caller learns nothing about other sessions' graphs.
  return absl::NotFoundError(absl::StrCat("graph handle '", handle, "' is not registered on task ", task_,
                                          " in session '", session_handle, "'"));
}

absl::StatusOr<std::shared_ptr<GraphMgr::Item>> GraphMgr::Find(const std::string& session_handle,
                                                               const std::string& handle) const {
  absl::MutexLock lock(&mu_);
  auto it = graphs_.find(handle);
  if (it == graphs_.end() || it->second->session_handle != session_handle) return NotRegistered(session_handle, handle);
  return it->second;
}

int GraphMgr::NumGraphs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(graphs_.size());
}

}  // namespace worker
}  // namespace weft
