#include "graph/placer.h"

#include <map>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "graph/device_name.h"

namespace weft {
namespace {

// The inputs that `n` updates in place: the variable and its slots.
// Every input of an update but its last (the gradient, or the value of a
// moving average).
std::vector<int> RefInputs(const Node& n) {
  if (!n.op_def().stateful || !absl::StartsWith(n.op(), "Apply") || n.num_inputs() < 2) return {};
  std::vector<int> refs(n.num_inputs() - 1);
  std::iota(refs.begin(), refs.end(), 0);
  return refs;
}

// Union-find over node ids; a group's root is its smallest id, so the
// grouping is independent of the order unions happen in.
class ColocationGroups {
 public:
  explicit ColocationGroups(int n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  int Find(int x) {
    while (parent_[x] != x) {
      parent_[x] = parent_[parent_[x]];
      x = parent_[x];
    }
    return x;
  }
  void Union(int a, int b) {
    a = Find(a);
    b = Find(b);
    if (a == b) return;
    if (a < b) std::swap(a, b);
    parent_[a] = b;
  }

 private:
  std::vector<int> parent_;
};

std::string Quoted(const std::string& device) { return absl::StrCat("'", device, "'"); }

GpuKernelAvailability& HasGpuKernel() {
  static GpuKernelAvailability* const f = new GpuKernelAvailability();
  return *f;
}

// Whether every op that updates a variable in place has a GPU kernel.
bool UpdatesHaveGpuKernels() {
  for (const char* op : {"ApplyGradientDescent", "ApplyMomentum", "ApplyAdam", "ApplyMovingAverage"}) {
    if (!HasGpuKernel()(op)) return false;
  }
  return true;
}

// The first CPU of `d`'s task, or -1.
int CpuOfTask(const std::vector<DeviceName>& avail, const DeviceName& d) {
  for (size_t i = 0; i < avail.size(); ++i) {
    if (avail[i].job == d.job && avail[i].task == d.task && avail[i].type == "CPU") return static_cast<int>(i);
  }
  return -1;
}

// The GPU:0 of the default device's task, or -1.
int GpuOfDefaultTask(const std::vector<DeviceName>& avail, int default_index) {
  const DeviceName& cpu = avail[default_index];
  for (size_t i = 0; i < avail.size(); ++i) {
    const DeviceName& d = avail[i];
    if (d.job == cpu.job && d.task == cpu.task && d.type == "GPU" && d.id == 0) return static_cast<int>(i);
  }
  return -1;
}

// The available devices, parsed, and their canonical names.
absl::Status ParseAvailable(const std::vector<std::string>& devices, std::vector<DeviceName>* avail,
                            std::vector<std::string>* avail_names) {
  for (const std::string& d : devices) {
    auto parsed = DeviceName::Parse(d);
    if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat("placement: ", parsed.status().message()));
    if (!parsed->IsFullySpecified()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "placement: available device '", d, "' is not a full name (/job:J/task:T/device:TYPE:N)"));
    }
    avail->push_back(*parsed);
    avail_names->push_back(parsed->ToString());
  }
  return absl::OkStatus();
}

// Each node's parsed device request, and the colocation groups: a node that
// updates a buffer in place joins the buffer's owner.
absl::Status ParseRequests(const Graph& g, std::vector<DeviceName>* request, ColocationGroups* groups) {
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node* node = g.node(i);
    auto parsed = DeviceName::Parse(node->requested_device());
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("node ", node->DebugName(), ": ", parsed.status().message()));
    }
    (*request)[i] = *parsed;
    for (int k : RefInputs(*node)) {
      if (k >= node->num_inputs()) continue;
      // The buffer's owner: the producer, through any Identity forwarding it.
      const Node* src = node->input(k).node;
      groups->Union(i, src->id());
      while (src->op() == "Identity") {
        src = src->input(0).node;
        groups->Union(i, src->id());
      }
    }
  }
  return absl::OkStatus();
}

// A colocation group's merged request, remembering who asked, for messages.
struct Group {
  DeviceName merged;
  std::vector<int> requesters;  // members with a request, in id order
};

// Merges the requests of each group's members; ordered by root, so the first
// error is deterministic.
absl::Status MergeRequests(const Graph& g, const std::vector<DeviceName>& request, ColocationGroups* groups,
                           std::map<int, Group>* by_root) {
  for (int i = 0; i < g.num_nodes(); ++i) {
    Group& grp = (*by_root)[groups->Find(i)];
    if (request[i].IsEmpty()) continue;
    auto merged = DeviceName::Merge(grp.merged, request[i]);
    if (!merged.ok()) {
      // Each part of `merged` came from one requester, so one conflicts pairwise.
      int other = grp.requesters.front();
      for (int r : grp.requesters) {
        if (!DeviceName::Merge(request[r], request[i]).ok()) {
          other = r;
          break;
        }
      }
      const Node* a = g.node(i);
      const Node* b = g.node(other);
      return absl::InvalidArgumentError(absl::StrCat(
          "node ", a->DebugName(), " requests device ", Quoted(a->requested_device()),
          " but must be colocated with node ", b->DebugName(), ", which requests device ",
          Quoted(b->requested_device()),
          ": an op that updates a variable in place runs on the variable's device; drop or align one request"));
    }
    grp.merged = *merged;
    grp.requesters.push_back(i);
  }
  return absl::OkStatus();
}

// Root -> whether the group may run on a GPU: every member has a GPU
// kernel. Empty when no GPU is available or no GPU kernels are known.
std::map<int, bool> GpuCapableGroups(const Graph& g, const std::vector<DeviceName>& avail, ColocationGroups* groups) {
  std::map<int, bool> gpu_ok;
  bool any_gpu = false;
  for (const DeviceName& d : avail) any_gpu = any_gpu || d.type == "GPU";
  if (any_gpu && HasGpuKernel()) {
    const bool updates_ok = UpdatesHaveGpuKernels();
    for (int i = 0; i < g.num_nodes(); ++i) {
      auto [it, inserted] = gpu_ok.emplace(groups->Find(i), true);
      const std::string& op = g.node(i)->op();
      if (it->second && (!HasGpuKernel()(op) || (op == "Variable" && !updates_ok))) it->second = false;
    }
  }
  return gpu_ok;
}

// The device (index into `avail`) for a group that asked for one, or an
// error naming the requester when none matches.
absl::StatusOr<int> ChooseRequested(const Graph& g, const std::vector<DeviceName>& avail, const Group& grp,
                                    bool gpu_capable, const std::string& available) {
  int chosen = -1;
  for (size_t d = 0; d < avail.size() && chosen < 0; ++d) {
    if (DeviceName::IsCompatible(grp.merged, avail[d])) chosen = static_cast<int>(d);
  }
  // Soft placement: a group asked onto a GPU with a member that has no GPU
  // kernel (an input pipeline a strategy put on a replica's device) runs
  // on that task's CPU instead.
  if (chosen >= 0 && avail[chosen].type == "GPU" && HasGpuKernel() && !gpu_capable) {
    const int cpu = CpuOfTask(avail, avail[chosen]);
    if (cpu >= 0) chosen = cpu;
  }
  if (chosen < 0) {
    const Node* who = g.node(grp.requesters.front());
    const std::string merged = grp.merged.ToString();
    const bool widened = DeviceName::Parse(who->requested_device())->ToString() != merged;
    return absl::InvalidArgumentError(absl::StrCat(
        "node ", who->DebugName(), " requests device ", Quoted(who->requested_device()),
        widened ? absl::StrCat(" (", Quoted(merged), " with the nodes colocated with it)") : "",
        ", which matches none of the available devices: ", available));
  }
  return chosen;
}

}  // namespace

void PlaceFeedsWithConsumers(Graph* g, const std::vector<std::string>& placeholders) {
  for (const std::string& name : placeholders) {
    Node* placeholder = g->FindNode(name);
    if (placeholder == nullptr || placeholder->out_edges().empty()) continue;
    const std::string& where = placeholder->out_edges().front().dst->assigned_device();
    bool one = true;
    for (const Node::OutEdge& e : placeholder->out_edges()) one = one && e.dst->assigned_device() == where;
    for (const Node* c : placeholder->control_outputs()) one = one && c->assigned_device() == where;
    absl::StatusOr<DeviceName> device = DeviceName::Parse(where);
    if (one && device.ok() && device->type == "GPU") placeholder->set_assigned_device(where);
  }
}

void SetGpuKernelAvailability(GpuKernelAvailability has_gpu_kernel) { HasGpuKernel() = std::move(has_gpu_kernel); }

absl::Status PlaceGraph(Graph* g, const std::vector<std::string>& devices, const std::string& default_device,
                        const PlacementOptions& options) {
  if (devices.empty()) return absl::InvalidArgumentError("placement: no devices are available");
  std::vector<DeviceName> avail;
  std::vector<std::string> avail_names;
  RETURN_IF_ERROR(ParseAvailable(devices, &avail, &avail_names));
  const std::string available = absl::StrJoin(avail_names, ", ");

  auto dflt = DeviceName::Parse(default_device);
  int default_index = -1;
  if (dflt.ok()) {
    for (size_t i = 0; i < avail.size() && default_index < 0; ++i) {
      if (avail[i] == *dflt) default_index = static_cast<int>(i);
    }
  }
  if (default_index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("placement: default device '", default_device,
                                                   "' is not one of the available devices: ", available));
  }

  const int n = g->num_nodes();
  std::vector<DeviceName> request(n);
  ColocationGroups groups(n);
  RETURN_IF_ERROR(ParseRequests(*g, &request, &groups));
  std::map<int, Group> by_root;
  RETURN_IF_ERROR(MergeRequests(*g, request, &groups, &by_root));

  // Groups that may run on a GPU: every member has a GPU kernel.
  const int gpu_index = options.prefer_gpu && HasGpuKernel() ? GpuOfDefaultTask(avail, default_index) : -1;
  const std::map<int, bool> gpu_ok = GpuCapableGroups(*g, avail, &groups);

  std::map<int, int> device_of_root;  // root -> index into avail
  for (const auto& [root, grp] : by_root) {
    auto ok = gpu_ok.find(root);
    const bool gpu_capable = ok != gpu_ok.end() && ok->second;
    if (grp.requesters.empty()) {
      device_of_root[root] = gpu_index >= 0 && gpu_capable ? gpu_index : default_index;
      continue;
    }
    ASSIGN_OR_RETURN(device_of_root[root], ChooseRequested(*g, avail, grp, gpu_capable, available));
  }

  for (int i = 0; i < n; ++i) g->node(i)->set_assigned_device(avail_names[device_of_root.at(groups.Find(i))]);
  return absl::OkStatus();
}

}  // namespace weft
