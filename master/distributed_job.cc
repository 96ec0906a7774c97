#include "master/distributed_job.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "graph/builder.h"
#include "graph/device_name.h"
#include "graph/input_ops.h"
#include "job/defaults.h"
#include "job/strategy_spec.h"

namespace weft {
namespace master {
namespace {

constexpr int64_t kEvalBatch = 500;

struct Cluster {
  // task -> its devices, in order; tasks of each job by index.
  std::map<std::string, std::vector<std::string>> devices_of_task;
  std::vector<std::string> workers;
  std::vector<std::string> ps;
};

absl::StatusOr<Cluster> ReadCluster(const std::vector<std::string>& devices) {
  Cluster c;
  std::map<std::pair<std::string, int>, std::vector<DeviceName>> by_task;
  for (const std::string& d : devices) {
    ASSIGN_OR_RETURN(DeviceName name, DeviceName::Parse(d));
    by_task[{name.job, name.task}].push_back(name);
  }
  for (auto& [task, names] : by_task) {
    // CPUs after accelerators, each by id.
    std::sort(names.begin(), names.end(), [](const DeviceName& a, const DeviceName& b) {
      if ((a.type == "CPU") != (b.type == "CPU")) return a.type != "CPU";
      return a.id < b.id;
    });
    const std::string t = TaskName(task.first, task.second);
    for (const DeviceName& n : names) c.devices_of_task[t].push_back(n.ToString());
    if (task.first == "worker") c.workers.push_back(t);
    if (task.first == "ps") c.ps.push_back(t);
  }
  return c;
}

bool OnGpuDevice(const std::string& device) { return device.find("/device:GPU:") != std::string::npos; }

std::string CpuOf(const Cluster& c, const std::string& task) {
  for (const std::string& d : c.devices_of_task.at(task)) {
    if (d.find("/device:CPU:") != std::string::npos) return d;
  }
  return c.devices_of_task.at(task).front();
}

absl::Status Missing(const JobSpec& job, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("job '", job.name(), "': strategy ", StrategySpec::Kind_Name(job.strategy().kind()), " ", what));
}

NodeDef* FindDef(GraphDef* g, const std::string& name) {
  for (NodeDef& n : *g->mutable_node()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

// The InputBatch node `name` on `device`, built through the op's helper.
absl::StatusOr<NodeDef> InputNode(const JobSpec& job, const TrainingGraph& training, const std::string& name,
                                  const std::string& device, const ops::InputBatchOptions& options) {
  Graph scratch;
  GraphBuilder b(&scratch);
  ops::InputBatch(&b, job.dataset(), options, name);
  RETURN_IF_ERROR(b.status());
  const GraphDef built = scratch.ToGraphDef();
  for (const NodeDef& n : built.node()) {
    if (n.name() == name) {
      NodeDef out = n;
      out.set_device(device);
      return out;
    }
  }
  return absl::InternalError(absl::StrCat("InputBatch helper made no node '", name, "'"));
}

// Turns placeholder `name` into Identity(`source`).
absl::Status Rewire(GraphDef* g, const std::string& name, const std::string& source) {
  NodeDef* n = FindDef(g, name);
  if (n == nullptr) return absl::InternalError(absl::StrCat("replicated graph has no '", name, "'"));
  n->set_op("Identity");
  n->clear_input();
  n->add_input(source);
  n->mutable_attr()->clear();
  return absl::OkStatus();
}

}  // namespace

// "/job:worker/task:1" of a full device name ("" when it does not parse).
static std::string TaskOfDevice(const std::string& device) {
  absl::StatusOr<DeviceName> d = DeviceName::Parse(device);
  return d.ok() ? TaskName(d->job, d->task) : "";
}

namespace {

// The strategy's options for `cluster`: what the job's strategy asks for,
// and the devices of its replicas and variables.
absl::StatusOr<StrategyOptions> OptionsFor(const JobSpec& job, Cluster& cluster, const NcclIdGenerator& new_nccl_id) {
  const StrategySpec& spec = job.strategy();
  StrategyOptions o;
  o.kind = spec.kind();
  o.sync = EffectiveSync(spec);
  o.fusion_bytes = EffectiveFusionBytes(spec);
  o.max_shard_bytes = spec.max_shard_bytes();
  o.replicas_to_aggregate = spec.replicas_to_aggregate();
  o.group_key = 1;
  o.new_nccl_id = new_nccl_id;
  o.cross_device_ops = spec.cross_device_ops();
  o.float16_all_reduce = job.mixed_precision().float16_all_reduce();
  const std::string in_job = absl::StrCat("job '", job.name(), "'");
  RETURN_IF_ERROR(
      Annotate(CheckStrategyKinds(spec.kind(), spec.sync(), spec.replicas_to_aggregate(), StrategySpec::AUTO), in_job));
  switch (spec.kind()) {
    case StrategySpec::PARAMETER_SERVER:
      if (cluster.ps.empty()) return Missing(job, "needs ps tasks (weft local --ps=M, or ps= in the cluster)");
      if (cluster.workers.empty()) return Missing(job, "needs worker tasks");
      for (const std::string& w : cluster.workers) o.replica_devices.push_back(cluster.devices_of_task[w].front());
      for (const std::string& p : cluster.ps) o.variable_devices.push_back(CpuOf(cluster, p));
      break;
    case StrategySpec::MULTI_WORKER_MIRRORED:
      if (cluster.workers.empty()) return Missing(job, "needs worker tasks");
      for (const std::string& w : cluster.workers) o.replica_devices.push_back(cluster.devices_of_task[w].front());
      break;
    case StrategySpec::MIRRORED:
    case StrategySpec::CENTRAL_STORAGE: {
      if (cluster.workers.empty()) return Missing(job, "needs a worker task");
      const std::vector<std::string>& local = cluster.devices_of_task[cluster.workers[0]];
      // GPUs come first; by default every GPU, or every device when none is a GPU.
      const int gpus = static_cast<int>(
          std::count_if(local.begin(), local.end(), [](const std::string& d) { return OnGpuDevice(d); }));
      const int n = EffectiveNumDevices(spec, static_cast<int>(local.size()), gpus);
      if (n > static_cast<int>(local.size())) {
        return Missing(job, absl::StrCat("asks for ", n, " devices but ", cluster.workers[0], " has ",
                                         local.size(), " (start it with --cpu_devices=", n, ")"));
      }
      o.replica_devices.assign(local.begin(), local.begin() + n);
      o.variable_devices = {CpuOf(cluster, cluster.workers[0])};
      break;
    }
    default:
      return Missing(job, "is not a distribution strategy");
  }
  const int n = static_cast<int>(o.replica_devices.size());
  RETURN_IF_ERROR(Annotate(CheckReplicasToAggregate(o.kind, o.replicas_to_aggregate, n), in_job));
  RETURN_IF_ERROR(Annotate(ReplicaBatch(job, n).status(), in_job));
  return o;
}

// Each replica's InputBatch, reading its shard on its own device, in place
// of its `features` and `labels` placeholders.
absl::Status AddReplicaInputs(const JobSpec& job, const TrainingGraph& training, const StrategyOptions& o,
                              int64_t start_step, DistributedPlan* p) {
  DistributedPlan& plan = *p;
  const int n = plan.num_replicas;
  const int64_t num_classes = job.has_model() ? job.model().num_classes() : 0;
  for (int r = 0; r < n; ++r) {
    ops::InputBatchOptions in;
    in.train = true;
    in.batch_size = plan.replica_batch;
    in.shard_index = r;
    in.num_shards = n;
    in.seed = job.seed();
    in.example_shape = training.example_shape;
    in.num_classes = num_classes;
    // Resuming at a step: the batches each replica has read by then. Sync
    // replicas read one per step; async ones take turns (about 1/n each);
    // a k-of-N global step trains on k replicas' batches.
    if (job.has_elastic()) in.global_batch = job.batch_size();  // one order whatever the replica count
    in.skip_batches = !plan.sync                     ? start_step / n
                      : plan.replicas_to_aggregate > 0 ? start_step * plan.replicas_to_aggregate / n
                                                       : start_step;
    plan.replica_tasks.push_back(TaskOfDevice(o.replica_devices[r]));
    const std::string name = ReplicaName(r, "input");
    ASSIGN_OR_RETURN(NodeDef node, InputNode(job, training, name, o.replica_devices[r], in));
    *plan.graph.add_node() = std::move(node);
    RETURN_IF_ERROR(Rewire(&plan.graph, plan.replicated.replicas[r].features, name));
    RETURN_IF_ERROR(Rewire(&plan.graph, plan.replicated.replicas[r].labels, name + ":1"));
  }
  return absl::OkStatus();
}

// Evaluation: replica 0's forward pass to `correct`, `eval_loss` and `correct_top_k`
// (a regression has only `eval_loss`), copied under "eval/" and fed by the
// test split on `device` (replica 0's).
absl::Status AddEvaluation(const JobSpec& job, const TrainingGraph& training, const std::string& device,
                           DistributedPlan* p) {
  DistributedPlan& plan = *p;
  const int64_t num_classes = job.has_model() ? job.model().num_classes() : 0;
  if ((!plan.replicated.correct.empty() || !plan.replicated.eval_loss.empty()) && !job.eval().skip()) {
    absl::flat_hash_map<std::string, const NodeDef*> by_name;
    for (const NodeDef& nd : plan.graph.node()) by_name[nd.name()] = &nd;
    const std::string features = plan.replicated.replicas[0].features;
    const std::string labels = plan.replicated.replicas[0].labels;
    absl::flat_hash_set<std::string> copy;
    std::deque<std::string> todo;
    if (!plan.replicated.correct.empty()) todo.push_back(InputNodeName(plan.replicated.correct));
    if (!plan.replicated.eval_loss.empty()) todo.push_back(InputNodeName(plan.replicated.eval_loss));
    if (!plan.replicated.correct_top_k.empty()) todo.push_back(InputNodeName(plan.replicated.correct_top_k));
    while (!todo.empty()) {
      const std::string name = todo.front();
      todo.pop_front();
      if (copy.contains(name) || name == features || name == labels) continue;
      auto it = by_name.find(name);
      if (it == by_name.end()) return absl::InternalError(absl::StrCat("evaluation reads unknown node '", name, "'"));
      if (it->second->op() == "Variable") continue;  // shared with training
      copy.insert(name);
      for (const std::string& in : it->second->input()) todo.push_back(InputNodeName(in));
    }
    // The copy reads eval/features and eval/labels, Identities of the test
    // input's outputs, where replica 0 read its own.
    auto eval_name = [&](const std::string& node) {
      if (node == features) return std::string("eval/features");
      if (node == labels) return std::string("eval/labels");
      return copy.contains(node) ? absl::StrCat("eval/", node) : node;
    };
    std::vector<NodeDef> added;
    for (const NodeDef& nd : plan.graph.node()) {
      if (!copy.contains(nd.name())) continue;
      NodeDef c = nd;
      c.set_name(absl::StrCat("eval/", nd.name()));
      for (std::string& in : *c.mutable_input()) in = RenameInputNode(in, eval_name);
      added.push_back(std::move(c));
    }
    for (NodeDef& c : added) *plan.graph.add_node() = std::move(c);
    for (const auto& [name, source] : {std::pair<const char*, const char*>{"eval/features", "eval/input"},
                                       std::pair<const char*, const char*>{"eval/labels", "eval/input:1"}}) {
      NodeDef* n = plan.graph.add_node();
      n->set_name(name);
      n->set_op("Identity");
      n->set_device(device);
      n->add_input(source);
    }
    ops::InputBatchOptions in;
    in.train = false;
    in.batch_size = kEvalBatch;
    in.seed = job.seed();
    in.example_shape = training.example_shape;
    in.num_classes = num_classes;
    ASSIGN_OR_RETURN(NodeDef node, InputNode(job, training, "eval/input", device, in));
    *plan.graph.add_node() = std::move(node);
    if (!plan.replicated.correct.empty()) plan.eval_correct = absl::StrCat("eval/", plan.replicated.correct);
    if (!plan.replicated.eval_loss.empty()) plan.eval_loss = absl::StrCat("eval/", plan.replicated.eval_loss);
    if (!plan.replicated.correct_top_k.empty()) {
      plan.eval_correct_top_k = absl::StrCat("eval/", plan.replicated.correct_top_k);
    }
    plan.eval_labels = "eval/labels";
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DistributedPlan> PlanDistributedJob(const JobSpec& job, const TrainingGraph& training,
                                                   const std::vector<std::string>& devices,
                                                   const NcclIdGenerator& new_nccl_id, int64_t start_step) {
  ASSIGN_OR_RETURN(Cluster cluster, ReadCluster(devices));
  ASSIGN_OR_RETURN(const StrategyOptions o, OptionsFor(job, cluster, new_nccl_id));
  const int n = static_cast<int>(o.replica_devices.size());
  DistributedPlan plan;
  plan.num_replicas = n;
  plan.replica_batch = job.batch_size() / n;
  plan.sync = o.sync;
  plan.replicas_to_aggregate = o.replicas_to_aggregate;
  absl::StatusOr<ReplicatedGraph> replicated = ApplyStrategy(training, o);
  if (!replicated.ok()) {
    return absl::Status(replicated.status().code(),
                        absl::StrCat("job '", job.name(), "': ", replicated.status().message()));
  }
  plan.replicated = *std::move(replicated);
  plan.graph = plan.replicated.graph->ToGraphDef();

  if (job.has_elastic()) {
    for (const std::string& d : o.replica_devices) {
      if (OnGpuDevice(d)) {
        return absl::UnimplementedError(absl::StrCat("job '", job.name(),
                                                     "': elastic jobs train on CPU replicas for now, and ", d,
                                                     " is a GPU (set device: CPU)"));
      }
    }
    // Shared variables (PARAMETER_SERVER) count their steps on the first ps.
    const std::string shared = o.kind == StrategySpec::PARAMETER_SERVER ? o.variable_devices.front() : "";
    RETURN_IF_ERROR(AddElasticState(o.replica_devices, shared, &plan.replicated, &plan.graph, &plan.elastic));
  }
  RETURN_IF_ERROR(AddReplicaInputs(job, training, o, start_step, &plan));
  RETURN_IF_ERROR(AddEvaluation(job, training, o.replica_devices[0], &plan));
  return plan;
}

absl::StatusOr<DistributedPlan> PlanUndistributedJob(const JobSpec& job, const TrainingGraph& training) {
  if (job.batch_size() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("job '", job.name(), "': batch_size ", job.batch_size(),
                                                   " must be positive"));
  }
  DistributedPlan plan;
  plan.num_replicas = 1;
  plan.replica_batch = job.batch_size();
  plan.sync = true;
  ReplicaNames r;
  r.features = training.features;
  r.labels = training.labels;
  r.loss = training.loss;
  r.train_op = training.train_op;
  plan.replicated.replicas.push_back(std::move(r));
  plan.replicated.train_targets = {training.train_op};
  plan.replicated.correct = training.correct;
  plan.replicated.eval_loss = training.eval_loss;
  plan.replicated.correct_top_k = training.correct_top_k;
  plan.graph = training.graph->ToGraphDef();
  // No device: the input goes where the placeholders' feeds went, the
  // session's default device.
  StrategyOptions o;
  o.replica_devices = {""};
  RETURN_IF_ERROR(AddReplicaInputs(job, training, o, /*start_step=*/0, &plan));
  RETURN_IF_ERROR(AddEvaluation(job, training, "", &plan));
  return plan;
}

std::string WhyNotNccl(const std::vector<DeviceAttributes>& devices) {
  absl::flat_hash_map<std::string, std::string> owner;  // desc -> first device
  for (const DeviceAttributes& d : devices) {
    if (d.device_type() != "GPU") continue;
    if (d.physical_device_desc().empty()) return absl::StrCat(d.name(), " does not say which GPU it is");
    auto [it, fresh] = owner.emplace(d.physical_device_desc(), d.name());
    if (!fresh) return absl::StrCat(d.name(), " and ", it->second, " are one GPU (", it->first, ")");
  }
  return "";
}

}  // namespace master
}  // namespace weft
