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
                   CollectiveRuntime* collectives)
    : task_(std::move(task)),
      devices_(std::move(devices)),
      inter_op_pool_(inter_op_pool),
      collectives_(collectives),
      // A restarted task must not accept a handle from its previous life.
      handle_prefix_(absl::StrCat("g", absl::Hex(absl::Uniform<uint32_t>(absl::BitGen())), "_")) {}

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

  auto item = std::make_shared<Item>();
  ASSIGN_OR_RETURN(item->graph, Graph::FromGraphDef(request.graph_def()));
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
  ASSIGN_OR_RETURN(item->executor, Executor::Create(item->graph.get(), device, std::move(opts)));
  item->master_incarnation = request.master_incarnation();
  item->session_handle = request.session_handle();
  // 128 random bits after the per-process prefix: a handle cannot be
  // guessed from another one.
  absl::BitGen gen;
  const std::string secret =
      absl::StrCat(absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16),
                   absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16));
  absl::MutexLock lock(&mu_);
  item->handle = absl::StrCat(handle_prefix_, next_handle_++, "_", secret);
  const std::string handle = item->handle;
  graphs_.emplace(handle, std::move(item));
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

int GraphMgr::NumGraphs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(graphs_.size());
}

}  // namespace worker
}  // namespace weft
