// Planning a distributed job: inputs on each replica's task, an evaluation
// copy reading the test split, and clear errors for a cluster that lacks
// what the strategy needs.
#include "master/distributed_job.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/attr.h"
#include "graph/graph.h"
#include "graph/lowering.h"
#include "graph/partition.h"
#include "gtest/gtest.h"
#include "master/elastic_plan.h"

namespace weft {
namespace master {
namespace {

JobSpec Job(StrategySpec::Kind kind) {
  JobSpec job;
  job.set_name("plan");
  ModelSpec* m = job.mutable_model();
  m->add_input_shape(6);
  m->set_num_classes(3);
  m->add_layer()->mutable_dense()->set_units(4);
  m->add_layer()->mutable_dense()->set_units(3);
  job.mutable_dataset()->set_dir("/nonexistent");
  job.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  job.set_batch_size(8);
  job.set_epochs(1);
  job.mutable_strategy()->set_kind(kind);
  job.mutable_strategy()->set_sync(true);
  return job;
}

const std::vector<std::string> kDevices = {
    "/job:worker/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:1", "/job:worker/task:1/device:CPU:0",
    "/job:worker/task:1/device:CPU:1", "/job:ps/task:0/device:CPU:0"};

TEST(DistributedJobTest, EachReplicaReadsItsShardOnItsTaskAndEvaluationReadsTheTestSplit) {
  for (auto kind : {StrategySpec::PARAMETER_SERVER, StrategySpec::MULTI_WORKER_MIRRORED, StrategySpec::MIRRORED,
                    StrategySpec::CENTRAL_STORAGE}) {
    SCOPED_TRACE(StrategySpec::Kind_Name(kind));
    const JobSpec job = Job(kind);
    auto tg = LowerJob(job);
    ASSERT_TRUE(tg.ok()) << tg.status();
    auto plan = PlanDistributedJob(job, *tg, kDevices);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->num_replicas, 2);
    EXPECT_EQ(plan->replica_batch, 4);
    auto g = Graph::FromGraphDef(plan->graph);
    ASSERT_TRUE(g.ok()) << g.status();
    for (int r = 0; r < 2; ++r) {
      const Node* in = (*g)->FindNode(ReplicaName(r, "input"));
      ASSERT_NE(in, nullptr);
      EXPECT_EQ(in->op(), "InputBatch");
      EXPECT_EQ(*GetIntAttr(in->def(), "shard_index"), r);
      EXPECT_EQ(*GetIntAttr(in->def(), "num_shards"), 2);
      EXPECT_EQ(*GetIntAttr(in->def(), "batch_size"), 4);
      const Node* features = (*g)->FindNode(plan->replicated.replicas[r].features);
      ASSERT_NE(features, nullptr);
      EXPECT_EQ(features->op(), "Identity");
      EXPECT_EQ(features->input(0).node, in);
      EXPECT_EQ(in->def().device(), features->def().device());
    }
    const Node* eval_in = (*g)->FindNode("eval/input");
    ASSERT_NE(eval_in, nullptr);
    EXPECT_FALSE(*GetBoolAttr(eval_in->def(), "train"));
    ASSERT_NE((*g)->FindNode(plan->eval_correct), nullptr) << plan->eval_correct;
  }
}

// An elastic job: every replica reads its slice of one global order, and
// gets a commit barrier before its updates, a step counter after them, and
// a copy of every variable from every other replica.
TEST(DistributedJobTest, AnElasticJobsReplicasCommitTheirStepsWholeAndCanTakeAPeersVariables) {
  JobSpec job = Job(StrategySpec::MULTI_WORKER_MIRRORED);
  job.mutable_elastic()->set_min_workers(1);
  auto tg = LowerJob(job);
  ASSERT_TRUE(tg.ok()) << tg.status();
  auto plan = PlanDistributedJob(job, *tg, kDevices, nullptr, /*start_step=*/7);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->num_replicas, 2);
  auto g = Graph::FromGraphDef(plan->graph);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(plan->elastic.step_reads.size(), 2u);
  ASSERT_EQ(plan->elastic.sync_from.size(), 2u);
  const size_t variables = plan->replicated.variable_node.size() + 1;  // the counter too
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    const Node* in = (*g)->FindNode(ReplicaName(r, "input"));
    ASSERT_NE(in, nullptr);
    EXPECT_EQ(*GetIntAttr(in->def(), "global_batch"), 8);
    EXPECT_EQ(*GetIntAttr(in->def(), "skip_batches"), 7);
    const Node* barrier = (*g)->FindNode(ReplicaName(r, "elastic/commit"));
    ASSERT_NE(barrier, nullptr);
    EXPECT_TRUE(*GetBoolAttr(barrier->def(), "_commit"));
    const Node* train = (*g)->FindNode(plan->replicated.replicas[r].train_op);
    ASSERT_NE(train, nullptr);
    int updates = 0;
    for (const std::string& input : train->def().input()) {
      const Node* u = (*g)->FindNode(input.substr(1));
      ASSERT_NE(u, nullptr) << input;
      if (u->op() == "AssignAdd") continue;  // the counter
      ++updates;
      EXPECT_TRUE(*GetBoolAttr(u->def(), "_commit")) << u->name();
      // Each update waits for the barrier, which waits for all its inputs.
      bool gated = false;
      for (const std::string& ui : u->def().input()) gated = gated || ui == "^" + barrier->name();
      EXPECT_TRUE(gated) << u->name();
      for (const std::string& ui : u->def().input()) {
        if (ui == "^" + barrier->name()) continue;
        const std::string node = InputNodeName(ui);
        bool waited = false;
        for (const std::string& bi : barrier->def().input()) waited = waited || bi == "^" + node;
        EXPECT_TRUE(waited) << barrier->name() << " does not wait for " << node;
      }
    }
    EXPECT_EQ(updates, 4);  // two dense layers' kernels and biases
    const Node* read = (*g)->FindNode(plan->elastic.step_reads[r]);
    ASSERT_NE(read, nullptr);
    EXPECT_EQ(read->input(0).node->name(), ReplicaName(r, "elastic/step"));
    EXPECT_EQ(*GetStringAttr(read->input(0).node->def(), "shared_name"), "elastic/step");
    // From replica r to the other one: an Assign per variable on its device.
    ASSERT_EQ(plan->elastic.sync_from[r].size(), 1u);
    const Node* sync = (*g)->FindNode(plan->elastic.sync_from[r][0]);
    ASSERT_NE(sync, nullptr);
    EXPECT_EQ(static_cast<size_t>(sync->def().input_size()), variables);
    EXPECT_EQ(sync->def().device(), kDevices[r == 0 ? 2 : 0]);
  }
}

// An elastic parameter-server job: the variables live once on the ps, so
// one counter there counts every step applied, each step (every replica's
// when sync, each replica's own when async) is gated by a commit barrier on
// the ps, and there is nothing to copy between replicas.
TEST(DistributedJobTest, AnElasticParameterServerJobCountsItsStepsOnThePsAndGatesEachWhole) {
  const std::string ps = kDevices.back();
  for (const bool sync : {true, false}) {
    SCOPED_TRACE(sync ? "sync" : "async");
    JobSpec job = Job(StrategySpec::PARAMETER_SERVER);
    job.mutable_strategy()->set_sync(sync);
    job.mutable_elastic()->set_min_workers(1);
    auto tg = LowerJob(job);
    ASSERT_TRUE(tg.ok()) << tg.status();
    auto plan = PlanDistributedJob(job, *tg, kDevices, nullptr, /*start_step=*/6);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->num_replicas, 2);
    EXPECT_TRUE(plan->elastic.shared);
    EXPECT_TRUE(plan->elastic.sync_from.empty());
    auto g = Graph::FromGraphDef(plan->graph);
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_EQ(plan->elastic.step_reads.size(), 1u);
    const Node* read = (*g)->FindNode(plan->elastic.step_reads[0]);
    ASSERT_NE(read, nullptr);
    const Node* counter = read->input(0).node;
    EXPECT_EQ(counter->op(), "Variable");
    EXPECT_EQ(counter->def().device(), ps);
    EXPECT_EQ(*GetStringAttr(counter->def(), "shared_name"), "elastic/step");
    std::map<std::string, int> barriers;  // gated updates per barrier
    for (int r = 0; r < 2; ++r) {
      const Node* train = (*g)->FindNode(plan->replicated.replicas[r].train_op);
      ASSERT_NE(train, nullptr);
      int increments = 0;
      for (const std::string& input : train->def().input()) {
        const Node* u = (*g)->FindNode(input.substr(1));
        ASSERT_NE(u, nullptr) << input;
        if (u->op() == "AssignAdd") {
          ++increments;
          EXPECT_EQ(u->input(0).node, counter) << "every replica counts on the one counter";
          continue;
        }
        EXPECT_TRUE(*GetBoolAttr(u->def(), "_commit")) << u->name();
        std::string barrier;
        for (const std::string& ui : u->def().input()) {
          if (absl::StrContains(ui, "elastic/commit")) barrier = ui.substr(1);
        }
        ASSERT_FALSE(barrier.empty()) << u->name() << " waits for no barrier";
        EXPECT_EQ((*g)->FindNode(barrier)->def().device(), ps);
        ++barriers[barrier];
      }
      EXPECT_EQ(increments, 1);
      // A step targets the updates on the ps: the increment too.
      const std::vector<std::string>& targets =
          sync ? plan->replicated.train_targets : plan->replicated.replicas[r].train_targets;
      EXPECT_NE(std::find(targets.begin(), targets.end(), ReplicaName(sync ? 0 : r, "elastic/step_add")),
                targets.end());
    }
    // Sync: one train op and one barrier for the four updates (its two
    // replicas' train ops are the same); async: one per replica.
    if (sync) {
      EXPECT_EQ(barriers, (std::map<std::string, int>{{ReplicaName(0, "elastic/commit"), 8}}));
    } else {
      EXPECT_EQ(barriers, (std::map<std::string, int>{{ReplicaName(0, "elastic/commit"), 4},
                                                      {ReplicaName(1, "elastic/commit"), 4}}));
    }
    // A barrier waits only for nodes beside it on the ps: one that waited
    // for a worker's node would cost a control message per step besides
    // the value's (async replicas' gradients come from their workers).
    for (const auto& [barrier, gated] : barriers) {
      for (const std::string& in : (*g)->FindNode(barrier)->def().input()) {
        EXPECT_EQ((*g)->FindNode(InputNodeName(in))->def().device(), ps) << barrier << " waits for " << in;
      }
    }
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(*GetIntAttr((*g)->FindNode(ReplicaName(r, "input"))->def(), "skip_batches"), sync ? 6 : 3);
    }
  }
}

TEST(DistributedJobTest, AJobWithoutAStrategyReadsItsWholeSplitWhereItsFeedsWent) {
  const JobSpec job = Job(StrategySpec::NONE);
  auto tg = LowerJob(job);
  ASSERT_TRUE(tg.ok()) << tg.status();
  auto plan = PlanUndistributedJob(job, *tg);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_replicas, 1);
  EXPECT_EQ(plan->replica_batch, 8);
  auto g = Graph::FromGraphDef(plan->graph);
  ASSERT_TRUE(g.ok()) << g.status();
  const Node* in = (*g)->FindNode(ReplicaName(0, "input"));
  ASSERT_NE(in, nullptr);
  EXPECT_EQ(in->op(), "InputBatch");
  EXPECT_TRUE(*GetBoolAttr(in->def(), "train"));
  EXPECT_EQ(*GetIntAttr(in->def(), "num_shards"), 1);
  EXPECT_EQ(*GetIntAttr(in->def(), "batch_size"), 8);
  EXPECT_EQ(in->def().device(), "");  // the session's default device
  for (const std::string& placeholder : {tg->features, tg->labels}) {
    const Node* n = (*g)->FindNode(placeholder);
    ASSERT_NE(n, nullptr) << placeholder;
    EXPECT_EQ(n->op(), "Identity") << placeholder;  // nothing left to feed
    EXPECT_EQ(n->input(0).node, in) << placeholder;
  }
  const Node* eval_in = (*g)->FindNode("eval/input");
  ASSERT_NE(eval_in, nullptr);
  EXPECT_FALSE(*GetBoolAttr(eval_in->def(), "train"));
  EXPECT_EQ(*GetIntAttr(eval_in->def(), "batch_size"), 500);  // as LocalTrainer evaluates
  ASSERT_NE((*g)->FindNode(plan->eval_correct), nullptr) << plan->eval_correct;

  JobSpec skip = job;
  skip.mutable_eval()->set_skip(true);
  plan = PlanUndistributedJob(skip, *tg);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->eval_correct.empty());
  skip.set_batch_size(0);
  EXPECT_EQ(PlanUndistributedJob(skip, *tg).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DistributedJobTest, AClusterWithoutWhatTheStrategyNeedsIsInvalidArgument) {
  JobSpec job = Job(StrategySpec::PARAMETER_SERVER);
  auto tg = LowerJob(job);
  ASSERT_TRUE(tg.ok());
  auto plan = PlanDistributedJob(job, *tg, {"/job:worker/task:0/device:CPU:0"});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(plan.status().message(), "ps tasks")) << plan.status();

  job.set_batch_size(7);
  plan = PlanDistributedJob(job, *tg, kDevices);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(plan.status().message(), "batch_size 7")) << plan.status();

  job = Job(StrategySpec::MIRRORED);
  job.mutable_strategy()->set_num_devices(3);
  plan = PlanDistributedJob(job, *tg, kDevices);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(plan.status().message(), "--cpu_devices=3")) << plan.status();
}

TEST(DistributedJobTest, ReplicasToAggregateIsCheckedAgainstTheReplicasAndTheStrategy) {
  // Two workers, so two PS replicas.
  JobSpec job = Job(StrategySpec::PARAMETER_SERVER);
  auto tg = LowerJob(job);
  ASSERT_TRUE(tg.ok()) << tg.status();
  for (int k : {1, 2}) {
    job.mutable_strategy()->set_replicas_to_aggregate(k);
    auto plan = PlanDistributedJob(job, *tg, kDevices);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->replicas_to_aggregate, k);
    ASSERT_EQ(plan->replicated.replicas.size(), 2u);
    EXPECT_FALSE(plan->replicated.replicas[1].push_outcomes.empty());
    EXPECT_TRUE(plan->replicated.train_op.empty());
    EXPECT_TRUE(Graph::FromGraphDef(plan->graph).ok());
  }
  for (int k : {3, -1}) {
    job.mutable_strategy()->set_replicas_to_aggregate(k);
    auto plan = PlanDistributedJob(job, *tg, kDevices);
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << k;
    EXPECT_TRUE(absl::StrContains(plan.status().message(), absl::StrCat("replicas_to_aggregate ", k)))
        << plan.status();
    EXPECT_TRUE(absl::StrContains(plan.status().message(), "2 replicas")) << plan.status();
  }
  job.mutable_strategy()->set_replicas_to_aggregate(1);
  job.mutable_strategy()->set_sync(false);
  auto plan = PlanDistributedJob(job, *tg, kDevices);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(plan.status().message(), "replicas_to_aggregate (1)")) << plan.status();
  JobSpec mirrored = Job(StrategySpec::MULTI_WORKER_MIRRORED);
  mirrored.mutable_strategy()->set_replicas_to_aggregate(1);
  plan = PlanDistributedJob(mirrored, *tg, kDevices);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(plan.status().message(), "MULTI_WORKER_MIRRORED")) << plan.status();
}

// Workers with a GPU hold MULTI_WORKER_MIRRORED's replicas on it; the
// master's NCCL id reaches every all-reduce and stays on the node when the
// graph is partitioned per device (what each worker receives).
TEST(DistributedJobTest, GpuReplicasAllReduceWithTheMastersNcclIdInEveryPartition) {
  const std::vector<std::string> devices = {
      "/job:worker/task:0/device:CPU:0", "/job:worker/task:0/device:GPU:0", "/job:worker/task:1/device:CPU:0",
      "/job:worker/task:1/device:GPU:0"};
  const JobSpec job = Job(StrategySpec::MULTI_WORKER_MIRRORED);
  auto tg = LowerJob(job);
  ASSERT_TRUE(tg.ok()) << tg.status();
  int calls = 0;
  const NcclIdGenerator fake = [&calls]() -> absl::StatusOr<std::string> {
    return absl::StrCat("fake-nccl-id-", ++calls);
  };
  auto plan = PlanDistributedJob(job, *tg, devices, fake);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(plan->replicated.num_nccl_groups, 1);
  auto g = Graph::FromGraphDef(plan->graph);
  ASSERT_TRUE(g.ok()) << g.status();
  int all_reduces = 0;
  for (const std::unique_ptr<Node>& n : (*g)->nodes()) {
    n->set_assigned_device(n->def().device());
    if (n->op() != "CollectiveAllReduce") continue;
    ++all_reduces;
    EXPECT_TRUE(absl::StrContains(n->def().device(), "/device:GPU:0")) << n->name();
  }
  EXPECT_EQ(all_reduces, 2 * plan->replicated.num_buckets);
  auto parts = PartitionGraph(**g);
  ASSERT_TRUE(parts.ok()) << parts.status();
  int seen = 0;
  for (const std::string& gpu : {devices[1], devices[3]}) {
    ASSERT_TRUE(parts->count(gpu)) << gpu;
    for (const NodeDef& n : parts->at(gpu).node()) {
      if (n.op() != "CollectiveAllReduce") continue;
      ++seen;
      EXPECT_EQ(GetStringAttrOr(n, "nccl_unique_id", "").value_or(""), "fake-nccl-id-1") << n.name();
    }
  }
  EXPECT_EQ(seen, all_reduces);

  // CPU replicas keep the gRPC ring; MIRRORED averages in process (AddN)
  // and has no all-reduce to give an id.
  for (auto [kind, cluster] : {std::pair{StrategySpec::MULTI_WORKER_MIRRORED, kDevices},
                               std::pair{StrategySpec::MIRRORED, devices}}) {
    SCOPED_TRACE(StrategySpec::Kind_Name(kind));
    const JobSpec other = Job(kind);
    calls = 0;
    plan = PlanDistributedJob(other, *tg, cluster, fake);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(calls, 0);
    EXPECT_EQ(plan->replicated.num_nccl_groups, 0);
    for (const NodeDef& n : plan->graph.node()) EXPECT_FALSE(n.attr().contains("nccl_unique_id")) << n.name();
  }
}

TEST(DistributedJobTest, MirroredTakesEveryGpuOfTheWorkerAndReducesThemInProcess) {
  const std::vector<std::string> devices = {"/job:worker/task:0/device:CPU:0", "/job:worker/task:0/device:GPU:1",
                                            "/job:worker/task:0/device:GPU:0"};
  JobSpec job = Job(StrategySpec::MIRRORED);
  auto tg = LowerJob(job);
  ASSERT_TRUE(tg.ok()) << tg.status();
  int calls = 0;
  const NcclIdGenerator fake = [&calls]() -> absl::StatusOr<std::string> {
    return absl::StrCat("fake-nccl-id-", ++calls);
  };
  auto plan = PlanDistributedJob(job, *tg, devices, fake);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(calls, 0);  // in process: no id
  ASSERT_EQ(plan->replica_tasks.size(), 2u);
  auto g = Graph::FromGraphDef(plan->graph);
  ASSERT_TRUE(g.ok()) << g.status();
  for (const std::unique_ptr<Node>& n : (*g)->nodes()) n->set_assigned_device(n->def().device());
  auto parts = PartitionGraph(**g);
  ASSERT_TRUE(parts.ok()) << parts.status();
  int seen = 0;
  for (const char* gpu : {"/job:worker/task:0/device:GPU:0", "/job:worker/task:0/device:GPU:1"}) {
    ASSERT_TRUE(parts->count(gpu)) << gpu;
    for (const NodeDef& n : parts->at(gpu).node()) {
      if (n.op() != "CollectiveAllReduce") continue;
      ++seen;
      EXPECT_EQ(GetStringAttrOr(n, "group_devices", "").value_or(""),
                "/job:worker/task:0/device:GPU:0,/job:worker/task:0/device:GPU:1")
          << n.name();
    }
  }
  EXPECT_EQ(seen, 2 * plan->replicated.num_buckets);
  EXPECT_GT(seen, 0);

  // Three devices asked for: the CPU joins, and the sum moves to the first device.
  job.mutable_strategy()->set_num_devices(3);
  job.set_batch_size(9);
  plan = PlanDistributedJob(job, *tg, devices, fake);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->replica_tasks.size(), 3u);
  for (const NodeDef& n : plan->graph.node()) EXPECT_NE(n.op(), "CollectiveAllReduce") << n.name();
  // ... which NCCL cannot serve.
  job.mutable_strategy()->set_cross_device_ops(StrategySpec::NCCL);
  plan = PlanDistributedJob(job, *tg, devices, fake);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(plan.status().message(), "job 'plan': strategy: cross_device_ops NCCL"))
      << plan.status();
}

DeviceAttributes Dev(const std::string& name, const std::string& type, const std::string& desc) {
  DeviceAttributes a;
  a.set_name(name);
  a.set_device_type(type);
  a.set_physical_device_desc(desc);
  return a;
}

// NCCL refuses two ranks on one GPU: two tasks that opened the same GPU (or a
// GPU that cannot say which it is) keep the cluster off NCCL.
TEST(WhyNotNcclTest, NeedsEveryGpuDistinctAndIdentified) {
  const std::string w0 = "/job:worker/task:0/device:", w1 = "/job:worker/task:1/device:";
  EXPECT_EQ(WhyNotNccl({Dev(w0 + "CPU:0", "CPU", ""), Dev(w1 + "CPU:0", "CPU", "")}), "");
  EXPECT_EQ(WhyNotNccl({Dev(w0 + "CPU:0", "CPU", ""), Dev(w0 + "GPU:0", "GPU", "GPU-aa"),
                        Dev(w1 + "GPU:0", "GPU", "GPU-bb")}),
            "");
  const std::string shared = WhyNotNccl({Dev(w0 + "GPU:0", "GPU", "GPU-aa"), Dev(w1 + "GPU:0", "GPU", "GPU-aa")});
  EXPECT_NE(shared.find(w1 + "GPU:0 and " + w0 + "GPU:0 are one GPU (GPU-aa)"), std::string::npos) << shared;
  const std::string unknown = WhyNotNccl({Dev(w0 + "GPU:0", "GPU", "GPU-aa"), Dev(w1 + "GPU:0", "GPU", "")});
  EXPECT_NE(unknown.find(w1 + "GPU:0 does not say which GPU"), std::string::npos) << unknown;
}

// The counters come from tasks over the network: the master takes one
// int64 that is not negative, and refuses anything else by its source.
TEST(AppliedStepsTest, TakesOneNonNegativeInt64AndNothingElse) {
  Tensor count(DType::kInt64, TensorShape{});
  count.data<int64_t>()[0] = 42;
  EXPECT_EQ(AppliedSteps(count, "the ps").value_or(-1), 42);
  count.data<int64_t>()[0] = -3;
  Tensor wide(DType::kFloat32, TensorShape{});
  Tensor two(DType::kInt64, TensorShape{2});
  for (const auto& [bad, why] : std::vector<std::pair<const Tensor*, std::string>>{
           {&count, "of /job:worker/task:1 says -3 steps"},
           {&wide, "of /job:worker/task:1 is not one int64 but float32[1 element(s)]"},
           {&two, "of /job:worker/task:1 is not one int64 but int64[2 element(s)]"}}) {
    absl::StatusOr<int64_t> n = AppliedSteps(*bad, "/job:worker/task:1");
    EXPECT_EQ(n.status().code(), absl::StatusCode::kDataLoss) << n.status();
    EXPECT_TRUE(absl::StrContains(n.status().message(), why)) << n.status();
  }
}

}  // namespace
}  // namespace master
}  // namespace weft
