#include "worker/graph_mgr.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/tensor_proto_coding.h"
#include "graph/device_name.h"
#include "graph/graph.h"
#include "runtime/executor.h"

namespace weft {
namespace worker {

struct GraphMgr::Item {
  std::string handle;
  std::string session_handle;  // the only session that may run or drop it
  std::unique_ptr<Graph> graph;
  std::vector<std::string> feeds;
  std::vector<std::string> fetches;
  // The session's variables on this device; declared before the executor,
  // whose kernels use them.
  std::shared_ptr<ResourceMgr> resources;
  std::string resources_key;
  uint64_t master_incarnation = 0;  // of the master that registered it (0: unknown)
  std::unique_ptr<Executor> executor;  // declared after the graph it runs
};

GraphMgr::GraphMgr(std::string task, std::vector<Device*> devices, ThreadPool* inter_op_pool,
                   CollectiveRuntime* collectives, GraphMgrLimits limits)
    : task_(std::move(task)),
      devices_(std::move(devices)),
      inter_op_pool_(inter_op_pool),
      collectives_(collectives),
      // A restarted task must not accept a handle from its previous life.
      handle_prefix_(absl::StrCat("g", absl::Hex(absl::Uniform<uint32_t>(absl::BitGen())), "_")),
      limits_(limits) {}

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

absl::StatusOr<std::string> GraphMgr::Register(const RegisterGraphRequest& request) {
  // The device: the one every node names (a partition holds one device).
  Device* device = nullptr;
  const NodeDef* first = nullptr;
  std::vector<std::string> sends;
  for (const NodeDef& node : request.graph_def().node()) {
    if (node.op() == "_Send") sends.push_back(node.name());
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
  if (device == nullptr) device = devices_.front();
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
  {
    absl::MutexLock lock(&mu_);
    auto& slot = session_resources_[item->resources_key];
    if (slot == nullptr) slot = std::make_shared<ResourceMgr>();
    item->resources = slot;
  }
  opts.resources = item->resources.get();
  item->feeds = opts.feeds;
  item->fetches = opts.fetches;
  // On failure from here on, a variable store made for this graph alone
  // must not outlive it.
  auto drop_resources = [&] {
    absl::MutexLock lock(&mu_);
    auto res = session_resources_.find(item->resources_key);
    if (res != session_resources_.end() && res->second.use_count() == 2) session_resources_.erase(res);
  };
  auto executor = Executor::Create(item->graph.get(), device, std::move(opts));
  if (!executor.ok()) {
    drop_resources();
    return executor.status();
  }
  item->executor = *std::move(executor);
  item->master_incarnation = request.master_incarnation();
  item->session_handle = request.session_handle();
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
    quota = CheckQuotasLocked(request.session_handle());
    if (quota.ok()) {
      item->handle = absl::StrCat(handle_prefix_, next_handle_++, "_", secret);
      handle = item->handle;
      graphs_.emplace(handle, std::move(item));
    }
  }
  if (!quota.ok()) {
    item->executor.reset();
    drop_resources();
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

absl::Status GraphMgr::Run(const RunGraphRequest& request, Rendezvous* rendezvous, RunGraphResponse* response) {
  ASSIGN_OR_RETURN(std::shared_ptr<Item> item, Find(request.session_handle(), request.graph_handle()));
  const int iterations = request.iterations() == 0 ? 1 : request.iterations();
  if (iterations < 0) {
    return absl::InvalidArgumentError(absl::StrCat("iterations must be positive, got ", request.iterations()));
  }
  if (iterations > limits_.max_iterations) {
    return absl::ResourceExhaustedError(absl::StrCat("RunGraph asks for ", iterations, " iterations, more than task ",
                                                     task_, "'s quota (--max_iterations=", limits_.max_iterations,
                                                     ")"));
  }
  int64_t last_step = 0;
  if (__builtin_add_overflow(request.step_id(), static_cast<int64_t>(iterations - 1), &last_step)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ids ", request.step_id(), " + ", iterations, " iterations overflow"));
  }

  // Feeds, in registered order; each exactly once.
  std::vector<Tensor> feeds(item->feeds.size());
  std::vector<bool> given(item->feeds.size(), false);
  for (const NamedTensorProto& send : request.send()) {
    auto it = std::find(item->feeds.begin(), item->feeds.end(), send.name());
    if (it == item->feeds.end()) {
      return absl::InvalidArgumentError(absl::StrCat("'", send.name(), "' is not a feed of graph ",
                                                     request.graph_handle(), " (feeds: ",
                                                     absl::StrJoin(item->feeds, ", "), ")"));
    }
    const size_t f = it - item->feeds.begin();
    if (given[f]) return absl::InvalidArgumentError(absl::StrCat("feed '", send.name(), "' is given twice"));
    given[f] = true;
    auto t = TensorFromProto(send.tensor());
    if (!t.ok()) return Annotate(t.status(), absl::StrCat("feed '", send.name(), "'"));
    feeds[f] = *std::move(t);
  }
  for (size_t f = 0; f < given.size(); ++f) {
    if (!given[f]) return absl::InvalidArgumentError(absl::StrCat("feed '", item->feeds[f], "' has no value"));
  }

  // Which registered fetches to return.
  std::vector<int> wanted;
  if (request.recv_key().empty()) {
    for (size_t i = 0; i < item->fetches.size(); ++i) wanted.push_back(static_cast<int>(i));
  } else {
    for (const std::string& key : request.recv_key()) {
      auto it = std::find(item->fetches.begin(), item->fetches.end(), key);
      if (it == item->fetches.end()) {
        return absl::InvalidArgumentError(absl::StrCat("'", key, "' is not a fetch of graph ",
                                                       request.graph_handle(), " (fetches: ",
                                                       absl::StrJoin(item->fetches, ", "), ")"));
      }
      wanted.push_back(static_cast<int>(it - item->fetches.begin()));
    }
  }

  // Known as running, so that a new master can abort it (AdoptMaster).
  {
    absl::MutexLock lock(&mu_);
    running_.emplace(request.step_id(), item->handle);
  }
  struct Unmark {
    GraphMgr* self;
    int64_t step;
    const std::string* handle;
    ~Unmark() {
      absl::MutexLock lock(&self->mu_);
      auto range = self->running_.equal_range(step);
      for (auto it = range.first; it != range.second; ++it) {
        if (it->second == *handle) {
          self->running_.erase(it);
          break;
        }
      }
    }
  } unmark{this, request.step_id(), &item->handle};
  std::vector<Tensor> fetched;
  absl::Status status;
  for (int i = 0; i < iterations && status.ok(); ++i) {
    // Shutdown stops a long RunGraph between iterations, not after all of
    // them (one atomic load per iteration).
    if (cancelled_.load(std::memory_order_acquire)) {
      absl::MutexLock lock(&mu_);
      status = cancel_status_;
      break;
    }
    status = item->executor->Run(feeds, &fetched, request.step_id() + i, rendezvous);
    if (!status.ok() && iterations > 1) {
      status = Annotate(status, absl::StrCat("iteration ", i, " (step ", request.step_id() + i, ")"));
    }
  }
  RETURN_IF_ERROR(status);
  for (int i : wanted) {
    NamedTensorProto* out = response->add_recv();
    out->set_name(item->fetches[i]);
    TensorToProto(fetched[i], out->mutable_tensor());
  }
  return absl::OkStatus();
}

std::vector<int64_t> GraphMgr::RunningSteps() const {
  std::vector<int64_t> steps;
  absl::MutexLock lock(&mu_);
  for (const auto& [step, handle] : running_) {
    if (steps.empty() || steps.back() != step) steps.push_back(step);
  }
  return steps;
}

int GraphMgr::NumGraphs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(graphs_.size());
}

}  // namespace worker
}  // namespace weft
