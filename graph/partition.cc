#include "graph/partition.h"

#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "graph/attr.h"
#include "graph/device_name.h"

namespace weft {
namespace {

constexpr int kControlSlot = -1;

// "/job:ps/task:0/device:CPU:0" -> "job_ps_task_0_device_CPU_0", for node names.
std::string SanitizeDevice(const std::string& device) {
  std::string s = absl::StrReplaceAll(device, {{"/", "_"}, {":", "_"}});
  if (!s.empty() && s[0] == '_') s.erase(0, 1);
  return s;
}

class Partitioner {
 public:
  explicit Partitioner(const Graph& g) : g_(g) {
    for (const auto& n : g.nodes()) used_names_.insert(n->name());
  }

  absl::StatusOr<std::map<std::string, GraphDef>> Run() {
    for (const auto& n : g_.nodes()) {
      auto d = DeviceName::Parse(n->assigned_device());
      if (!d.ok() || !d->IsFullySpecified()) {
        return absl::FailedPreconditionError(absl::StrCat("partitioning: node ", n->DebugName(),
                                                          " has no full assigned device ('", n->assigned_device(),
                                                          "'); run PlaceGraph first"));
      }
    }
    for (const auto& n : g_.nodes()) {
      const std::string& dst = n->assigned_device();
      NodeDef def = n->def();
      def.set_device(dst);
      def.clear_input();
      for (const Endpoint& e : n->inputs()) {
        def.add_input(e.node->assigned_device() == dst ? TensorName(e) : RecvFor(e.node, e.index, dst));
      }
      for (const Node* c : n->control_inputs()) {
        def.add_input(absl::StrCat("^", c->assigned_device() == dst ? c->name() : RecvFor(c, kControlSlot, dst)));
      }
      *parts_[dst].add_node() = std::move(def);
    }
    return std::move(parts_);
  }

 private:
  std::string UniqueName(const std::string& base) {
    std::string name = base;
    for (int i = 1; used_names_.contains(name); ++i) name = absl::StrCat(base, "_", i);
    used_names_.insert(name);
    return name;
  }

  // The _Recv on `dst` that delivers output `index` of `src` (or its control
  // signal for kControlSlot), creating it and its _Send on first use.
  std::string RecvFor(const Node* src, int index, const std::string& dst) {
    const auto key = std::make_tuple(src->id(), index, dst);
    auto it = recv_of_.find(key);
    if (it != recv_of_.end()) return it->second;

    const bool control = index == kControlSlot;
    const std::string& src_device = src->assigned_device();
    const std::string base = control ? absl::StrCat(src->name(), "_control") : absl::StrCat(src->name(), "_", index);
    const std::string to = absl::StrCat("/to/", SanitizeDevice(dst));
    const std::string tensor_name =
        control ? absl::StrCat("^", src->name()) : absl::StrCat(src->name(), ":", index);
    auto set_common = [&](NodeDef* def) {
      auto& attr = *def->mutable_attr();
      attr["tensor_name"] = Attr("tensor_name", tensor_name).second;
      attr["send_device"] = Attr("send_device", src_device).second;
      attr["recv_device"] = Attr("recv_device", dst).second;
      attr["send_device_incarnation"] = Attr("send_device_incarnation", int64_t{0}).second;
      attr["client_terminated"] = Attr("client_terminated", false).second;
    };
    GraphDef& src_part = parts_[src_device];

    std::string sent = index == 0 ? src->name() : absl::StrCat(src->name(), ":", index);
    DType dtype = DType::kFloat32;
    TensorShape shape;  // scalar, for the control signal
    if (control) {
      // A control edge carries no value: send a dummy scalar computed after `src`.
      NodeDef* dummy = src_part.add_node();
      dummy->set_name(UniqueName(absl::StrCat("_ctrl/", src->name(), to)));
      dummy->set_op("Const");
      dummy->set_device(src_device);
      dummy->add_input(absl::StrCat("^", src->name()));
      (*dummy->mutable_attr())["value"] = Attr("value", Tensor::Scalar<float>(0.0f)).second;
      sent = dummy->name();
    } else {
      dtype = src->output_type(index);
      shape = src->output_shape(index);
    }

    NodeDef* send = src_part.add_node();
    send->set_name(UniqueName(absl::StrCat("_send/", base, to)));
    send->set_op("_Send");
    send->set_device(src_device);
    send->add_input(sent);
    set_common(send);

    NodeDef* recv = parts_[dst].add_node();
    recv->set_name(UniqueName(absl::StrCat("_recv/", base, to)));
    recv->set_op("_Recv");
    recv->set_device(dst);
    set_common(recv);
    (*recv->mutable_attr())["tensor_type"] = Attr("tensor_type", dtype).second;
    (*recv->mutable_attr())["shape"] = Attr("shape", shape).second;

    recv_of_.emplace(key, recv->name());
    return recv->name();
  }

  const Graph& g_;
  std::map<std::string, GraphDef> parts_;
  absl::flat_hash_set<std::string> used_names_;
  absl::flat_hash_map<std::tuple<int, int, std::string>, std::string> recv_of_;
};

}  // namespace

absl::StatusOr<std::map<std::string, GraphDef>> PartitionGraph(const Graph& placed) {
  return Partitioner(placed).Run();
}

std::string RendezvousKey(const std::string& send_device, int64_t incarnation, const std::string& recv_device,
                          const std::string& tensor_name, int64_t step_id) {
  return absl::StrCat(send_device, ";", absl::Hex(static_cast<uint64_t>(incarnation), absl::kZeroPad16), ";",
                      recv_device, ";", tensor_name, ";", step_id);
}

}  // namespace weft
