#include "master/strategy.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/device_name.h"

namespace weft {
namespace master {
namespace {

bool IsUpdate(const NodeDef& n) { return absl::StartsWith(n.op(), "Apply"); }

// One optimizer update: the variables it writes (the variable first, then
// its slots) and the gradient it applies (its last data input).
struct Update {
  const NodeDef* node = nullptr;
  std::vector<std::string> vars;
  int grad_input = 0;
  std::string grad;  // tensor name
  int64_t bytes = 0;  // the variable's (not its slots')
};

int64_t VariableBytes(const NodeDef& v) {
  auto shape = GetShapeAttr(v, "shape");
  auto dtype = GetTypeAttr(v, "dtype");
  if (!shape.ok() || !dtype.ok() || !shape->IsFullyDefined()) return 0;
  return shape->num_elements() * static_cast<int64_t>(DTypeSize(*dtype));
}

std::string TaskOf(const std::string& device) {
  const size_t d = device.find("/device:");
  return d == std::string::npos ? device : device.substr(0, d);
}

bool OnGpu(const std::string& device) {
  absl::StatusOr<DeviceName> d = DeviceName::Parse(device);
  return d.ok() && d->type == "GPU";
}

class Rewriter {
 public:
  Rewriter(const TrainingGraph& training, const StrategyOptions& options)
      : training_(training), options_(options), n_(static_cast<int>(options.replica_devices.size())) {}

  absl::StatusOr<ReplicatedGraph> Run() {
    RETURN_IF_ERROR(Check());
    in_ = training_.graph->ToGraphDef();
    for (const NodeDef& n : in_.node()) by_name_[n.name()] = &n;
    RETURN_IF_ERROR(FindUpdates());
    switch (options_.kind) {
      case StrategySpec::MULTI_WORKER_MIRRORED:
        Mirrored(Reduction::kAcrossTasks);
        break;
      case StrategySpec::MIRRORED:
        Mirrored(LocalNccl() ? Reduction::kLocalNccl : Reduction::kFirstDevice);
        break;
      case StrategySpec::PARAMETER_SERVER:
        RETURN_IF_ERROR(ShardLargeVariables());
        if (options_.replicas_to_aggregate > 0) {
          RETURN_IF_ERROR(Accumulated());
        } else {
          Shared(options_.sync);
        }
        break;
      case StrategySpec::CENTRAL_STORAGE:
        RETURN_IF_ERROR(ShardLargeVariables());
        Shared(/*sync=*/true);
        break;
      default:
        break;
    }
    // A split variable's whole value, for whoever reads it from outside.
    for (const auto& [var, parts] : sharded_) {
      NodeDef* value = Add(var + "/value", "ConcatRows", "", {});
      for (const std::string& p : parts) value->add_input(p);
      value->set_device(FindOut(parts[0])->device());
      variable_node_[var] = value->name();
    }
    ReplicatedGraph out;
    ASSIGN_OR_RETURN(out.graph, Graph::FromGraphDef(out_));
    for (int r = 0; r < n_; ++r) {
      ReplicaNames names;
      names.features = ReplicaName(r, training_.features);
      names.labels = ReplicaName(r, training_.labels);
      names.loss = RenameInputNode(training_.loss, [r](const std::string& s) { return ReplicaName(r, s); });
      names.train_op = replica_train_[r];
      if (!push_outcomes_.empty()) names.push_outcomes = push_outcomes_[r];
      out.replicas.push_back(std::move(names));
    }
    out.train_op = train_op_;
    out.train_targets = train_targets_;
    out.loss = loss_;
    auto on_replica0 = [](const std::string& t) {
      return t.empty() ? t : RenameInputNode(t, [](const std::string& s) { return ReplicaName(0, s); });
    };
    out.correct = on_replica0(training_.correct);
    out.eval_loss = on_replica0(training_.eval_loss);
    for (const auto& [var, node] : variable_node_) {
      out.variable_node[var] = node;
      out.variable_device[var] = out.graph->FindNode(node)->def().device();
    }
    out.num_buckets = num_buckets_;
    out.num_nccl_groups = num_nccl_groups_;
    out.nccl_id_status = nccl_id_status_;
    out.replicas_to_aggregate = options_.replicas_to_aggregate;
    return out;
  }

 private:
  absl::Status Check() const {
    if (training_.graph == nullptr) return absl::InvalidArgumentError("strategy: no training graph");
    switch (options_.kind) {
      case StrategySpec::MULTI_WORKER_MIRRORED:
      case StrategySpec::MIRRORED:
        break;
      case StrategySpec::PARAMETER_SERVER:
      case StrategySpec::CENTRAL_STORAGE:
        if (options_.variable_devices.empty()) {
          return absl::InvalidArgumentError(absl::StrCat("strategy ", StrategySpec::Kind_Name(options_.kind),
                                                         " needs at least one device for its variables"));
        }
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("strategy ", StrategySpec::Kind_Name(options_.kind), " is not a distribution strategy"));
    }
    if (n_ < 1) return absl::InvalidArgumentError("strategy: no replica devices");
    const int k = options_.replicas_to_aggregate;
    if (k != 0 && (options_.kind != StrategySpec::PARAMETER_SERVER || !options_.sync)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strategy: replicas_to_aggregate ", k, " needs kind PARAMETER_SERVER with sync: true, not ",
          StrategySpec::Kind_Name(options_.kind), options_.sync ? "" : " with sync: false"));
    }
    if (k < 0 || k > n_) {
      return absl::InvalidArgumentError(absl::StrCat("strategy: replicas_to_aggregate ", k,
                                                     " must be between 0 (all, in lockstep) and the ", n_,
                                                     " replicas"));
    }
    if (options_.cross_device_ops != StrategySpec::AUTO) {
      if (options_.kind != StrategySpec::MIRRORED) {
        return absl::InvalidArgumentError(absl::StrCat(
            "strategy: cross_device_ops ", StrategySpec::CrossDeviceOps_Name(options_.cross_device_ops),
            " is for MIRRORED, not ", StrategySpec::Kind_Name(options_.kind)));
      }
      if (options_.cross_device_ops == StrategySpec::NCCL && n_ > 1 && !LocalNccl()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "strategy: cross_device_ops NCCL needs every replica on a GPU of its own, but the replicas are on ",
            absl::StrJoin(options_.replica_devices, ", ")));
      }
    }
    if (options_.kind == StrategySpec::MULTI_WORKER_MIRRORED) {
      std::set<std::string> tasks;
      for (const std::string& d : options_.replica_devices) tasks.insert(TaskOf(d));
      if (tasks.size() != options_.replica_devices.size()) {
        return absl::InvalidArgumentError(
            "MULTI_WORKER_MIRRORED runs one replica per task; use MIRRORED for several devices of one task");
      }
    }
    return absl::OkStatus();
  }

  absl::Status FindUpdates() {
    for (const NodeDef& n : in_.node()) {
      if (n.op() == "Variable") variables_.push_back(n.name());
      if (!IsUpdate(n)) continue;
      Update u;
      u.node = &n;
      int data_inputs = 0;
      for (const std::string& in : n.input()) data_inputs += absl::StartsWith(in, "^") ? 0 : 1;
      if (data_inputs < 2) {
        return absl::InvalidArgumentError(absl::StrCat("strategy: update '", n.name(), "' (", n.op(),
                                                       ") needs a variable and a gradient input"));
      }
      u.grad_input = data_inputs - 1;
      u.grad = n.input(u.grad_input);
      for (int i = 0; i < u.grad_input; ++i) {
        const std::string var = InputNodeName(n.input(i));
        auto it = by_name_.find(var);
        if (it == by_name_.end() || it->second->op() != "Variable") {
          return absl::InvalidArgumentError(absl::StrCat("strategy: input ", i, " of update '", n.name(), "' (",
                                                         n.op(), ") is '", n.input(i), "', not a variable"));
        }
        u.vars.push_back(var);
      }
      u.bytes = VariableBytes(*by_name_[u.vars[0]]);
      updates_.push_back(std::move(u));
      update_names_.insert(n.name());
    }
    if (updates_.empty()) return absl::InvalidArgumentError("strategy: the graph has no optimizer updates");
    return absl::OkStatus();
  }

  // Replica r's copy of node `n` (renamed inputs, replica's device).
  NodeDef* Copy(const NodeDef& n, int r, const std::function<std::string(const std::string&)>& rename) {
    NodeDef* c = out_.add_node();
    *c = n;
    c->set_name(ReplicaName(r, n.name()));
    c->set_device(options_.replica_devices[r]);
    for (std::string& in : *c->mutable_input()) in = RenameInputNode(in, rename);
    return c;
  }

  NodeDef* FindOut(const std::string& name) {
    for (NodeDef& n : *out_.mutable_node()) {
      if (n.name() == name) return &n;
    }
    return nullptr;
  }

  NodeDef* Add(const std::string& name, const std::string& op, const std::string& device,
               std::vector<std::string> inputs) {
    NodeDef* n = out_.add_node();
    n->set_name(name);
    n->set_op(op);
    n->set_device(device);
    for (std::string& in : inputs) n->add_input(std::move(in));
    return n;
  }

  void SetAttr(NodeDef* n, std::pair<std::string, AttrValue> attr) { (*n->mutable_attr())[attr.first] = attr.second; }

  // The mean loss over replicas, on replica 0's device.
  void MeanLoss() {
    std::vector<std::string> losses;
    for (int r = 0; r < n_; ++r) {
      losses.push_back(RenameInputNode(training_.loss, [r](const std::string& s) { return ReplicaName(r, s); }));
    }
    const std::string& dev = options_.replica_devices[0];
    if (n_ == 1) {
      Add("loss", "Identity", dev, {losses[0]});
    } else {
      Add("loss/sum", "AddN", dev, losses);
      NodeDef* scale = Add("loss/scale", "Const", dev, {});
      SetAttr(scale, Attr("value", Tensor::Scalar<float>(1.0f / static_cast<float>(n_))));
      Add("loss", "Mul", dev, {"loss/sum", "loss/scale"});
    }
    loss_ = "loss";
  }

  // `sum` scaled by 1/n_ as node `name` on `device`; returns its tensor name.
  std::string Mean(const std::string& name, const std::string& device, std::vector<std::string> terms) {
    if (terms.size() == 1) return terms[0];
    Add(name + "/sum", "AddN", device, std::move(terms));
    NodeDef* scale = Add(name + "/scale", "Const", device, {});
    SetAttr(scale, Attr("value", Tensor::Scalar<float>(1.0f / static_cast<float>(n_))));
    Add(name, "Mul", device, {name + "/sum", name + "/scale"});
    return name;
  }

  // How a mirrored strategy's replicas meet: an all-reduce across tasks
  // (MULTI_WORKER_MIRRORED), an NCCL all-reduce across the GPUs of one task,
  // or a sum on the first device.
  enum class Reduction { kAcrossTasks, kLocalNccl, kFirstDevice };

  // MIRRORED through NCCL: asked for (or not refused) and possible, i.e.
  // several replicas, each on a GPU of its own.
  bool LocalNccl() const {
    if (options_.cross_device_ops == StrategySpec::REDUCE_TO_FIRST_DEVICE || n_ < 2) return false;
    std::set<std::string> distinct(options_.replica_devices.begin(), options_.replica_devices.end());
    return static_cast<int>(distinct.size()) == n_ &&
           std::all_of(options_.replica_devices.begin(), options_.replica_devices.end(), OnGpu);
  }

  void Mirrored(Reduction how) {
    const bool collective = how != Reduction::kFirstDevice;
    auto rename_for = [](int r) { return [r](const std::string& s) { return ReplicaName(r, s); }; };
    // Buckets of updates, in graph order, each about fusion_bytes.
    std::vector<std::vector<int>> buckets;
    if (collective) {
      int64_t filled = 0;
      for (int i = 0; i < static_cast<int>(updates_.size()); ++i) {
        if (buckets.empty() || (filled > 0 && filled + updates_[i].bytes > options_.fusion_bytes)) {
          buckets.emplace_back();
          filled = 0;
        }
        buckets.back().push_back(i);
        filled += updates_[i].bytes;
      }
      num_buckets_ = static_cast<int>(buckets.size());
    }
    absl::flat_hash_map<const NodeDef*, std::vector<NodeDef*>> update_copies;
    for (int r = 0; r < n_; ++r) {
      for (const NodeDef& n : in_.node()) {
        if (n.name() == training_.train_op) continue;
        NodeDef* c = Copy(n, r, rename_for(r));
        if (n.op() == "Variable") {
          if (how == Reduction::kAcrossTasks) {
            SetAttr(c, Attr("shared_name", n.name()));  // one copy per task
          } else {
            SetAttr(c, Attr("init_name", n.name()));  // copies in one task
          }
          if (r == 0) variable_node_[n.name()] = c->name();
        }
        if (IsUpdate(n)) update_copies[&n].push_back(c);
      }
      // The replica's train op runs its updates.
      NodeDef* train = Add(ReplicaName(r, "train"), "NoOp", options_.replica_devices[r], {});
      for (const Update& u : updates_) train->add_input("^" + ReplicaName(r, u.node->name()));
      replica_train_.push_back(train->name());
    }
    if (collective) {
      std::vector<std::string> tasks;
      for (const std::string& d : options_.replica_devices) tasks.push_back(TaskOf(d));
      const std::string group_tasks = absl::StrJoin(tasks, ",");
      const std::string group_devices = absl::StrJoin(options_.replica_devices, ",");
      for (int r = 0; r < n_; ++r) {
        for (size_t b = 0; b < buckets.size(); ++b) {
          NodeDef* ar = Add(ReplicaName(r, absl::StrCat("allreduce/bucket_", b)), "CollectiveAllReduce",
                            options_.replica_devices[r], {});
          int k = 0;
          for (int i : buckets[b]) {
            const Update& u = updates_[i];
            ar->add_input(RenameInputNode(u.grad, rename_for(r)));
            NodeDef* c = update_copies[u.node][r];
            c->set_input(u.grad_input, k == 0 ? ar->name() : absl::StrCat(ar->name(), ":", k));
            ++k;
          }
          SetAttr(ar, Attr("group_size", static_cast<int64_t>(n_)));
          SetAttr(ar, Attr("group_key", options_.group_key));
          SetAttr(ar, Attr("instance_key", static_cast<int64_t>(b + 1)));
          SetAttr(ar, Attr("mean", true));
          if (how == Reduction::kAcrossTasks) {
            SetAttr(ar, Attr("group_tasks", group_tasks));
          } else {
            SetAttr(ar, Attr("group_devices", group_devices));
          }
        }
      }
      // The in-process group is issued as one NCCL group call per bucket
      // (runtime/local_gather.h), so it needs neither an id nor an order.
      if (how == Reduction::kAcrossTasks) SetNcclIds();
    } else {
      // In-process all-reduce: the mean on the first device, read by all.
      for (const Update& u : updates_) {
        std::vector<std::string> terms;
        for (int r = 0; r < n_; ++r) terms.push_back(RenameInputNode(u.grad, rename_for(r)));
        const std::string mean = Mean(absl::StrCat("allreduce/", u.node->name()), options_.replica_devices[0], terms);
        for (int r = 0; r < n_; ++r) update_copies[u.node][r]->set_input(u.grad_input, mean);
      }
    }
    NodeDef* train = Add("train", "NoOp", options_.replica_devices[0], {});
    for (const std::string& t : replica_train_) train->add_input("^" + t);
    train_op_ = "train";
    train_targets_ = replica_train_;
    MeanLoss();
  }

  // Gives each all-reduce group (group_key, group_tasks) of two or more
  // ranks, all on GPUs, one NCCL unique id on all its nodes: the workers
  // cache a communicator per (GPU, group_key, rank, size, id), so every
  // bucket of the group shares one communicator. Ops on one communicator
  // must be issued in the same order on every rank, and the dataflow alone
  // does not fix the order of independent buckets, so each replica's
  // buckets are chained by control edges, the highest instance first
  // (backprop reaches the last updates' gradients first).
  void SetNcclIds() {
    if (!options_.new_nccl_id) return;
    std::map<std::pair<int64_t, std::string>, std::vector<NodeDef*>> groups;
    for (NodeDef& n : *out_.mutable_node()) {
      if (n.op() != "CollectiveAllReduce") continue;
      const int64_t key = GetIntAttr(n, "group_key").value_or(0);
      groups[{key, GetStringAttrOr(n, "group_tasks", "").value_or("")}].push_back(&n);
    }
    for (auto& [group, nodes] : groups) {
      const bool nccl = std::all_of(nodes.begin(), nodes.end(), [](const NodeDef* n) {
        return OnGpu(n->device()) && GetIntAttr(*n, "group_size").value_or(1) > 1;
      });
      if (!nccl) continue;
      absl::StatusOr<std::string> id = options_.new_nccl_id();
      if (!id.ok()) {
        nccl_id_status_ = absl::Status(id.status().code(),
                                       absl::StrCat("NCCL unique id for all-reduce group ", group.first, " (",
                                                    group.second, "): ", id.status().message()));
        continue;
      }
      std::map<std::string, std::vector<NodeDef*>> by_device;
      for (NodeDef* n : nodes) {
        SetAttr(n, Attr("nccl_unique_id", *id));
        by_device[n->device()].push_back(n);
      }
      for (auto& [device, chain] : by_device) {
        std::stable_sort(chain.begin(), chain.end(), [](const NodeDef* a, const NodeDef* b) {
          return GetIntAttr(*a, "instance_key").value_or(0) > GetIntAttr(*b, "instance_key").value_or(0);
        });
        for (size_t i = 1; i < chain.size(); ++i) chain[i]->add_input("^" + chain[i - 1]->name());
      }
      ++num_nccl_groups_;
    }
  }

  // Variables (and their updates) on variable_devices, spread by bytes: the
  // largest group first onto the least-loaded device.
  std::map<std::string, std::string> SpreadVariables() {
    // Union the variables that one update writes, so they stay together.
    std::map<std::string, std::string> parent;
    std::function<std::string(const std::string&)> find = [&](const std::string& v) {
      auto it = parent.find(v);
      if (it == parent.end() || it->second == v) return v;
      return it->second = find(it->second);
    };
    for (const std::string& v : variables_) parent[v] = v;
    for (const Update& u : updates_) {
      for (size_t i = 1; i < u.vars.size(); ++i) parent[find(u.vars[i])] = find(u.vars[0]);
    }
    std::map<std::string, std::pair<int64_t, std::vector<std::string>>> groups;
    for (const std::string& v : variables_) {
      auto& g = groups[find(v)];
      g.first += VariableBytes(*by_name_[v]);
      g.second.push_back(v);
    }
    std::vector<std::pair<int64_t, std::vector<std::string>>> order;
    for (auto& [root, g] : groups) order.push_back(g);
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<int64_t> load(options_.variable_devices.size(), 0);
    std::map<std::string, std::string> device_of;
    for (const auto& [bytes, vars] : order) {
      const size_t d = std::min_element(load.begin(), load.end()) - load.begin();
      load[d] += bytes;
      for (const std::string& v : vars) device_of[v] = options_.variable_devices[d];
    }
    return device_of;
  }

  // Splits every update whose variable exceeds max_shard_bytes into one
  // update per row shard: shard variables (the variable's and its slots'
  // rows; scalar slots copied), SliceRows of the gradient per shard, and a
  // ConcatRows that every other reader of the variable reads instead.
  absl::Status ShardLargeVariables() {
    if (options_.max_shard_bytes <= 0) return absl::OkStatus();
    absl::flat_hash_map<std::string, std::vector<std::string>> parts_of;  // var -> its shard variables
    absl::flat_hash_set<std::string> drop;  // replaced variables and updates
    GraphDef out;
    for (const Update& u : updates_) {
      const NodeDef& var = *by_name_[u.vars[0]];
      auto shape = GetShapeAttr(var, "shape");
      if (!shape.ok() || shape->rank() < 1 || u.bytes <= options_.max_shard_bytes) continue;
      const int64_t rows = shape->dim(0);
      const int64_t shards = std::min<int64_t>(rows, (u.bytes + options_.max_shard_bytes - 1) / options_.max_shard_bytes);
      if (shards < 2) continue;
      drop.insert(u.node->name());
      for (const std::string& v : u.vars) drop.insert(v);
      int64_t offset = 0;
      for (int64_t s = 0; s < shards; ++s) {
        const int64_t n = rows / shards + (s < rows % shards ? 1 : 0);
        const std::string suffix = absl::StrCat("/part_", s);
        NodeDef* update = out.add_node();
        *update = *u.node;
        update->set_name(u.node->name() + suffix);
        for (size_t i = 0; i < u.vars.size(); ++i) {
          const NodeDef& v = *by_name_[u.vars[i]];
          auto vshape = GetShapeAttr(v, "shape");
          NodeDef* part = out.add_node();
          *part = v;
          part->set_name(v.name() + suffix);
          if (vshape.ok() && vshape->rank() >= 1 && vshape->dim(0) == rows) {
            std::vector<int64_t> dims(vshape->dims().begin(), vshape->dims().end());
            dims[0] = n;
            SetAttr(part, Attr("shape", TensorShape(dims)));
            SetAttr(part, Attr("init_shape", *vshape));
            SetAttr(part, Attr("row_offset", offset));
            SetAttr(part, Attr("init_name", v.name()));
            parts_of[v.name()].push_back(part->name());
          }
          update->set_input(static_cast<int>(i), part->name());
        }
        NodeDef* slice = out.add_node();
        slice->set_name(update->name() + "/grad");
        slice->set_op("SliceRows");
        slice->add_input(u.grad);
        SetAttr(slice, Attr("begin", offset));
        SetAttr(slice, Attr("size", n));
        update->set_input(u.grad_input, slice->name());
        offset += n;
      }
    }
    if (drop.empty()) return absl::OkStatus();
    // Readers of a split variable read its stacked shards.
    for (const auto& [var, parts] : parts_of) {
      NodeDef* concat = out.add_node();
      concat->set_name(var + "/stacked");
      concat->set_op("ConcatRows");
      for (const std::string& p : parts) concat->add_input(p);
      sharded_[var] = parts;
    }
    for (const NodeDef& n : in_.node()) {
      if (drop.contains(n.name())) continue;
      NodeDef* c = out.add_node();
      *c = n;
      for (std::string& in : *c->mutable_input()) {
        in = RenameInputNode(in, [&](const std::string& s) { return parts_of.contains(s) ? s + "/stacked" : s; });
      }
    }
    in_ = std::move(out);
    by_name_.clear();
    for (const NodeDef& n : in_.node()) by_name_[n.name()] = &n;
    variables_.clear();
    updates_.clear();
    update_names_.clear();
    return FindUpdates();
  }

  void Shared(bool sync) {
    const std::map<std::string, std::string> device_of = SpreadVariables();
    absl::flat_hash_set<std::string> shared(variables_.begin(), variables_.end());
    auto rename_for = [&shared](int r) {
      return [r, &shared](const std::string& s) { return shared.contains(s) ? s : ReplicaName(r, s); };
    };
    for (const std::string& v : variables_) {
      NodeDef* c = out_.add_node();
      *c = *by_name_[v];
      c->set_device(device_of.at(v));
      variable_node_[v] = v;
    }
    // Everything but the variables, the updates and the train op, per replica.
    for (int r = 0; r < n_; ++r) {
      for (const NodeDef& n : in_.node()) {
        if (shared.contains(n.name()) || update_names_.contains(n.name()) || n.name() == training_.train_op) continue;
        Copy(n, r, rename_for(r));
      }
    }
    auto replica_inputs = [&](const NodeDef& update, int r, NodeDef* out) {
      // Control inputs (reads the update must follow) from replica r.
      for (const std::string& in : update.input()) {
        if (absl::StartsWith(in, "^")) out->add_input(RenameInputNode(in, rename_for(r)));
      }
    };
    if (sync) {
      NodeDef* train = Add("train", "NoOp", options_.replica_devices[0], {});
      for (const Update& u : updates_) {
        const std::string& dev = device_of.at(u.vars[0]);
        std::vector<std::string> terms;
        for (int r = 0; r < n_; ++r) terms.push_back(RenameInputNode(u.grad, rename_for(r)));
        const std::string mean = Mean(absl::StrCat("aggregate/", u.node->name()), dev, terms);
        NodeDef* c = out_.add_node();
        c->set_name(u.node->name());
        c->set_op(u.node->op());
        c->set_device(dev);
        *c->mutable_attr() = u.node->attr();
        for (int i = 0; i < u.grad_input; ++i) c->add_input(u.node->input(i));
        c->add_input(mean);
        for (int r = 0; r < n_; ++r) replica_inputs(*u.node, r, c);
        train->add_input("^" + u.node->name());
        train_targets_.push_back(u.node->name());
      }
      for (int r = 0; r < n_; ++r) replica_train_.push_back("train");
      train_op_ = "train";
      MeanLoss();
    } else {
      for (int r = 0; r < n_; ++r) {
        NodeDef* train = Add(ReplicaName(r, "train"), "NoOp", options_.replica_devices[r], {});
        for (const Update& u : updates_) {
          NodeDef* c = out_.add_node();
          c->set_name(ReplicaName(r, u.node->name()));
          c->set_op(u.node->op());
          c->set_device(device_of.at(u.vars[0]));
          *c->mutable_attr() = u.node->attr();
          for (int i = 0; i < u.grad_input; ++i) c->add_input(u.node->input(i));
          c->add_input(RenameInputNode(u.grad, rename_for(r)));
          replica_inputs(*u.node, r, c);
          train->add_input("^" + c->name());
        }
        replica_train_.push_back(train->name());
      }
    }
  }

  // Sync PS aggregating the first k of N gradients on the ps (see the
  // header): free-running replicas, each with its step reads, ordered reads
  // of the variables, pushes and train op.
  absl::Status Accumulated() {
    const int k = options_.replicas_to_aggregate;
    for (const Update& u : updates_) {
      const std::string& op = u.node->op();
      if (op != "ApplyGradientDescent" && op != "ApplyMomentum" && op != "ApplyAdam") {
        return absl::InvalidArgumentError(absl::StrCat("strategy: replicas_to_aggregate supports the sgd, momentum "
                                                       "and adam updates, not '", u.node->name(), "' (", op, ")"));
      }
    }
    const std::map<std::string, std::string> device_of = SpreadVariables();
    absl::flat_hash_set<std::string> shared(variables_.begin(), variables_.end());
    absl::flat_hash_map<std::string, const Update*> update_of;  // variable -> the update writing it
    for (const Update& u : updates_) {
      for (const std::string& v : u.vars) update_of[v] = &u;
    }
    for (const std::string& v : variables_) {
      NodeDef* c = out_.add_node();
      *c = *by_name_[v];
      c->set_device(device_of.at(v));
      variable_node_[v] = v;
    }
    auto step_node = [](int r, const Update& u) { return ReplicaName(r, u.node->name() + "/local_step"); };
    for (int r = 0; r < n_; ++r) {
      for (const Update& u : updates_) {
        NodeDef* step = Add(step_node(r, u), "AccumulatorStep", device_of.at(u.vars[0]), {});
        SetAttr(step, Attr("accumulator", u.node->name()));
        SetAttr(step, Attr("num_required", static_cast<int64_t>(k)));
      }
      // A trained variable is read through an Identity on its ps that runs
      // after the replica read its accumulator's step, so the step a
      // gradient carries is never newer than the weights it was computed on.
      std::set<std::string> reads;
      auto rename = [&](const std::string& s) {
        if (!shared.contains(s)) return ReplicaName(r, s);
        if (!update_of.contains(s)) return s;
        reads.insert(s);
        return ReplicaName(r, "sync/" + s);
      };
      for (const NodeDef& n : in_.node()) {
        if (shared.contains(n.name()) || update_names_.contains(n.name()) || n.name() == training_.train_op) continue;
        Copy(n, r, rename);
      }
      for (const std::string& v : reads) {
        Add(ReplicaName(r, "sync/" + v), "Identity", device_of.at(v), {v, "^" + step_node(r, *update_of.at(v))});
      }
      NodeDef* train = Add(ReplicaName(r, "train"), "NoOp", options_.replica_devices[r], {});
      std::vector<std::string> outcomes;
      for (const Update& u : updates_) {
        NodeDef* c = Add(ReplicaName(r, u.node->name()), "Accumulate" + u.node->op(), device_of.at(u.vars[0]), {});
        *c->mutable_attr() = u.node->attr();
        SetAttr(c, Attr("accumulator", u.node->name()));
        SetAttr(c, Attr("num_required", static_cast<int64_t>(k)));
        for (int i = 0; i < u.grad_input; ++i) c->add_input(u.node->input(i));
        c->add_input(RenameInputNode(u.grad, rename));
        c->add_input(step_node(r, u));
        for (const std::string& in : u.node->input()) {
          if (absl::StartsWith(in, "^")) c->add_input(RenameInputNode(in, rename));
        }
        train->add_input("^" + c->name());
        outcomes.push_back(c->name() + ":1");
      }
      replica_train_.push_back(train->name());
      push_outcomes_.push_back(std::move(outcomes));
    }
    return absl::OkStatus();
  }

  const TrainingGraph& training_;
  const StrategyOptions& options_;
  const int n_;
  GraphDef in_;
  GraphDef out_;
  absl::flat_hash_map<std::string, const NodeDef*> by_name_;
  std::vector<std::string> variables_;
  std::vector<Update> updates_;
  absl::flat_hash_set<std::string> update_names_;
  std::map<std::string, std::string> variable_node_;
  std::vector<std::string> replica_train_;
  std::vector<std::vector<std::string>> push_outcomes_;  // per replica (replicas_to_aggregate)
  std::map<std::string, std::vector<std::string>> sharded_;  // split variable -> its shard variables
  std::string train_op_;
  std::vector<std::string> train_targets_;
  std::string loss_;
  int num_buckets_ = 0;
  int num_nccl_groups_ = 0;
  absl::Status nccl_id_status_;
};

}  // namespace

std::string ReplicaName(int r, const std::string& name) { return absl::StrCat("replica_", r, "/", name); }

absl::StatusOr<ReplicatedGraph> ApplyStrategy(const TrainingGraph& training, const StrategyOptions& options) {
  return Rewriter(training, options).Run();
}

}  // namespace master
}  // namespace weft
