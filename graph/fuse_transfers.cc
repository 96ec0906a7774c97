#include "graph/fuse_transfers.h"

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/device_name.h"
#include "graph/ops/transfer_shapes.h"

namespace weft {
namespace {

struct DeviceInfo {
  std::string task;  // "/job:worker/task:0"
  std::string type;  // "CPU"
};

absl::StatusOr<DeviceInfo> Describe(const std::string& device) {
  ASSIGN_OR_RETURN(DeviceName d, DeviceName::Parse(device));
  return DeviceInfo{TaskName(d.job, d.task), d.type};
}

// depth(n): the most task boundaries on any path into n (data or control).
absl::StatusOr<absl::flat_hash_map<std::string, int>> CrossTaskDepths(const Graph& g) {
  std::vector<std::string> task(g.num_nodes());
  for (const auto& n : g.nodes()) {
    ASSIGN_OR_RETURN(DeviceInfo info, Describe(n->assigned_device()));
    task[n->id()] = info.task;
  }
  std::vector<int> depth(g.num_nodes(), -1);
  std::vector<std::pair<const Node*, bool>> stack;  // (node, inputs done)
  for (const auto& root : g.nodes()) {
    if (depth[root->id()] >= 0) continue;
    stack.push_back({root.get(), false});
    while (!stack.empty()) {
      auto [n, expanded] = stack.back();
      if (depth[n->id()] >= 0) {
        stack.pop_back();
        continue;
      }
      std::vector<const Node*> ins;
      for (const Endpoint& e : n->inputs()) ins.push_back(e.node);
      for (const Node* c : n->control_inputs()) ins.push_back(c);
      if (!expanded) {
        stack.back().second = true;
        for (const Node* in : ins) {
          if (depth[in->id()] < 0) stack.push_back({in, false});
        }
        continue;
      }
      int d = 0;
      for (const Node* in : ins) {
        if (depth[in->id()] < 0) return absl::InternalError(absl::StrCat("cycle through ", n->DebugName()));
        d = std::max(d, depth[in->id()] + (task[in->id()] != task[n->id()] ? 1 : 0));
      }
      depth[n->id()] = d;
      stack.pop_back();
    }
  }
  absl::flat_hash_map<std::string, int> by_name;
  for (const auto& n : g.nodes()) by_name[n->name()] = depth[n->id()];
  return by_name;
}

std::string Sanitize(const std::string& device) {
  std::string s = absl::StrReplaceAll(device, {{"/", "_"}, {":", "_"}});
  if (!s.empty() && s[0] == '_') s.erase(0, 1);
  return s;
}

struct Member {
  const NodeDef* send;
  const NodeDef* recv;
  TensorShape shape;
};

void RemoveNodes(GraphDef* def, const absl::flat_hash_set<std::string>& names) {
  auto* nodes = def->mutable_node();
  nodes->erase(std::remove_if(nodes->begin(), nodes->end(),
                              [&](const NodeDef& n) { return names.contains(n.name()); }),
               nodes->end());
}

// (send_device, recv_device, tensor_name) -> the _Recv that takes it.
using RecvIndex = std::map<std::tuple<std::string, std::string, std::string>, const NodeDef*>;
// (S, D, dtype, depth) -> members, in S's node order.
using TransferGroups = std::map<std::tuple<std::string, std::string, int, int>, std::vector<Member>>;

// The edits fusion makes, collected before any is applied: the Members
// point into the GraphDefs being edited.
struct FusionEdits {
  std::map<std::string, absl::flat_hash_set<std::string>> remove;  // device -> node names
  std::map<std::string, std::vector<NodeDef>> add;
  std::map<std::string, absl::flat_hash_map<std::string, std::string>> rename;  // device -> old recv -> unpack
};

// Every node name in use (fused nodes get fresh ones), and each _Recv by
// what it receives.
absl::Status IndexPartitions(const std::map<std::string, GraphDef>& parts, absl::flat_hash_set<std::string>* used_names,
                             RecvIndex* recv_of) {
  for (const auto& [device, def] : parts) {
    for (const NodeDef& n : def.node()) {
      used_names->insert(n.name());
      if (n.op() != "_Recv") continue;
      ASSIGN_OR_RETURN(std::string send_device, GetStringAttr(n, "send_device"));
      ASSIGN_OR_RETURN(std::string tensor_name, GetStringAttr(n, "tensor_name"));
      (*recv_of)[{send_device, device, tensor_name}] = &n;
    }
  }
  return absl::OkStatus();
}

// `base`, else base_1, base_2, ...: the first name not in `used_names`,
// which then holds it.
std::string UniqueName(const std::string& base, absl::flat_hash_set<std::string>* used_names) {
  std::string name = base;
  for (int i = 1; used_names->contains(name); ++i) name = absl::StrCat(base, "_", i);
  used_names->insert(name);
  return name;
}

// Adds `send` (a _Send on `send_device`) to its group when it may be fused:
// a data send between CPUs of two tasks, with a static shape, fed from a
// node of the placed graph.
absl::Status GroupSend(const std::map<std::string, GraphDef>& parts, const absl::flat_hash_map<std::string, int>& depth,
                       const RecvIndex& recv_of, const NodeDef& send, TransferGroups* groups) {
  if (send.op() != "_Send" || send.input_size() != 1) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string tensor_name, GetStringAttr(send, "tensor_name"));
  ASSIGN_OR_RETURN(bool client, GetBoolAttrOr(send, "client_terminated", false));
  if (client || tensor_name.empty() || tensor_name[0] == '^') return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string send_device, GetStringAttr(send, "send_device"));
  ASSIGN_OR_RETURN(std::string recv_device, GetStringAttr(send, "recv_device"));
  ASSIGN_OR_RETURN(DeviceInfo s, Describe(send_device));
  ASSIGN_OR_RETURN(DeviceInfo d, Describe(recv_device));
  if (s.task == d.task || s.type != "CPU" || d.type != "CPU" || parts.count(recv_device) == 0) {
    return absl::OkStatus();
  }
  auto r = recv_of.find({send_device, recv_device, tensor_name});
  if (r == recv_of.end()) return absl::OkStatus();
  ASSIGN_OR_RETURN(TensorShape shape, GetShapeAttr(*r->second, "shape"));
  ASSIGN_OR_RETURN(DType dtype, GetTypeAttr(*r->second, "tensor_type"));
  if (!shape.IsFullyDefined()) return absl::OkStatus();
  std::string src_node;
  int src_index = 0;
  RETURN_IF_ERROR(ParseTensorName(send.input(0), &src_node, &src_index));
  auto it = depth.find(src_node);
  if (it == depth.end()) return absl::OkStatus();  // not from the placed graph: leave it
  (*groups)[{send_device, recv_device, static_cast<int>(dtype), it->second}].push_back(
      Member{&send, r->second, shape});
  return absl::OkStatus();
}

// The names of one fused group's four nodes.
struct FusedNames {
  std::string pack, send, recv, unpack;
};

// Emits one group's PackTensors and _Send on the sending device, and its
// _Recv and UnpackTensors on the receiving one; the members are marked for
// removal and their consumers for renaming to the unpacked outputs.
absl::Status EmitFusedGroup(const std::string& send_device, const std::string& recv_device, DType dtype,
                            const FusedNames& names, const std::vector<Member>& members, FusionEdits* edits) {
  const std::string tensor_name = absl::StrCat(names.pack, ":0");
  NodeDef pack_def;
  pack_def.set_name(names.pack);
  pack_def.set_op("PackTensors");
  pack_def.set_device(send_device);
  std::vector<int64_t> ranks, dims, elements;
  for (const Member& m : members) {
    pack_def.add_input(m.send->input(0));
    ranks.push_back(m.shape.rank());
    for (int64_t x : m.shape.dims()) dims.push_back(x);
    elements.push_back(m.shape.num_elements());
    edits->remove[send_device].insert(m.send->name());
    edits->remove[recv_device].insert(m.recv->name());
  }
  std::vector<int64_t> offsets;
  absl::StatusOr<int64_t> total = PackedLayout(elements, dtype, &offsets);
  if (!total.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("fusing transfers from ", send_device, " to ", recv_device, ": ",
                                                   total.status().message()));
  }
  NodeDef send_def = *members[0].send;
  send_def.set_name(names.send);
  send_def.clear_input();
  send_def.add_input(names.pack);
  (*send_def.mutable_attr())["tensor_name"] = Attr("tensor_name", tensor_name).second;

  NodeDef recv_def = *members[0].recv;
  recv_def.set_name(names.recv);
  recv_def.clear_input();
  auto& rattr = *recv_def.mutable_attr();
  rattr["tensor_name"] = Attr("tensor_name", tensor_name).second;
  rattr["shape"] = Attr("shape", TensorShape{*total}).second;
  rattr["tensor_type"] = Attr("tensor_type", dtype).second;

  NodeDef unpack_def;
  unpack_def.set_name(names.unpack);
  unpack_def.set_op("UnpackTensors");
  unpack_def.set_device(recv_device);
  unpack_def.add_input(names.recv);
  auto& uattr = *unpack_def.mutable_attr();
  uattr["T"] = Attr("T", dtype).second;
  uattr["num_outputs"] = Attr("num_outputs", static_cast<int64_t>(members.size())).second;
  uattr["ranks"] = Attr("ranks", ranks).second;
  uattr["dims"] = Attr("dims", dims).second;

  for (size_t i = 0; i < members.size(); ++i) {
    edits->rename[recv_device][members[i].recv->name()] = absl::StrCat(names.unpack, ":", i);
  }
  // Rename's control form ("^recv" -> "^unpack") is derived in RenameInputs.
  edits->add[send_device].push_back(std::move(pack_def));
  edits->add[send_device].push_back(std::move(send_def));
  edits->add[recv_device].push_back(std::move(recv_def));
  edits->add[recv_device].push_back(std::move(unpack_def));
  return absl::OkStatus();
}

// Points the inputs of `def`'s nodes that read a removed _Recv at the
// UnpackTensors output that replaces it (data and control inputs alike).
absl::Status RenameInputs(const absl::flat_hash_map<std::string, std::string>& rename, GraphDef* def) {
  for (NodeDef& n : *def->mutable_node()) {
    for (std::string& in : *n.mutable_input()) {
      const bool control = !in.empty() && in[0] == '^';
      std::string node;
      int index = 0;
      if (control) {
        node = in.substr(1);
      } else if (!ParseTensorName(in, &node, &index).ok()) {
        continue;
      }
      auto it = rename.find(node);
      if (it == rename.end()) continue;
      if (control) {
        std::string target;
        int ignored = 0;
        RETURN_IF_ERROR(ParseTensorName(it->second, &target, &ignored));
        in = absl::StrCat("^", target);
      } else {
        in = it->second;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyEdits(FusionEdits* edits, std::map<std::string, GraphDef>* parts) {
  for (auto& [device, def] : *parts) {
    auto rn = edits->rename.find(device);
    if (rn != edits->rename.end()) RETURN_IF_ERROR(RenameInputs(rn->second, &def));
    auto rm = edits->remove.find(device);
    if (rm != edits->remove.end()) RemoveNodes(&def, rm->second);
    auto ad = edits->add.find(device);
    if (ad != edits->add.end()) {
      for (NodeDef& n : ad->second) *def.add_node() = std::move(n);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<FuseTransfersStats> FuseCrossTaskTransfers(const Graph& placed,
                                                          std::map<std::string, GraphDef>* parts) {
  ASSIGN_OR_RETURN(auto depth, CrossTaskDepths(placed));
  absl::flat_hash_set<std::string> used_names;
  RecvIndex recv_of;
  RETURN_IF_ERROR(IndexPartitions(*parts, &used_names, &recv_of));

  TransferGroups groups;
  for (const auto& [device, def] : *parts) {
    for (const NodeDef& send : def.node()) RETURN_IF_ERROR(GroupSend(*parts, depth, recv_of, send, &groups));
  }

  FuseTransfersStats stats;
  FusionEdits edits;
  for (const auto& [key, members] : groups) {
    if (members.size() < 2) continue;
    const auto& [send_device, recv_device, dtype_int, d] = key;
    const DType dtype = static_cast<DType>(dtype_int);
    const std::string suffix = absl::StrCat("depth", d, "_", DTypeName(dtype), "/to/", Sanitize(recv_device));
    FusedNames names;
    names.pack = UniqueName(absl::StrCat("_pack/", Sanitize(send_device), "/", suffix), &used_names);
    names.send = UniqueName(absl::StrCat("_send/", names.pack), &used_names);
    names.recv = UniqueName(absl::StrCat("_recv/", names.pack), &used_names);
    names.unpack = UniqueName(absl::StrCat("_unpack/", names.pack), &used_names);
    RETURN_IF_ERROR(EmitFusedGroup(send_device, recv_device, dtype, names, members, &edits));
    ++stats.groups;
    stats.sends_fused += static_cast<int>(members.size());
  }
  if (stats.groups == 0) return stats;
  RETURN_IF_ERROR(ApplyEdits(&edits, parts));
  return stats;
}

}  // namespace weft
