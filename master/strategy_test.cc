// The strategy rewrites, run on in-process clusters: synchronous strategies
// with N replicas and global batch B end k steps with the variables of
// single-process training at batch B; asynchronous replicas lose no update.
#include "master/strategy.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cmath>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "google/protobuf/text_format.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/lowering.h"
#include "gtest/gtest.h"
#include "master/in_process_cluster.h"
#include "master/master_server.h"
#include "master/master_session.h"
#include "master/worker_cache.h"
#include "worker/worker_server.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace master {
namespace {

using ::weft::testing::RandomTensor;

constexpr int kExample = 6;
constexpr int kClasses = 3;
constexpr int kBatch = 8;  // global
constexpr int kSteps = 3;

JobSpec MlpJob(const std::string& optimizer) {
  JobSpec job;
  const std::string text = absl::StrCat(R"pb(
    name: "strategy-test"
    model {
      input_shape: [ 6 ]
      num_classes: 3
      layer { dense { units: 8 activation: RELU } }
      layer { dense { units: 5 activation: TANH } }
      layer { dense { units: 3 } }
    }
    batch_size: 8
    seed: 3
  )pb",
                                        optimizer);
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &job));
  return job;
}

Tensor Labels(int64_t n, uint64_t seed) {
  Tensor t(DType::kInt32, TensorShape({n}));
  for (int64_t i = 0; i < n; ++i) t.flat<int32_t>()[i] = static_cast<int32_t>((i * 7 + seed) % kClasses);
  return t;
}

// Rows [begin, end) of a [n, ...] tensor.
Tensor Rows(const Tensor& t, int64_t begin, int64_t end) {
  std::vector<int64_t> dims(t.shape().dims().begin(), t.shape().dims().end());
  const int64_t row = t.NumElements() / dims[0];
  dims[0] = end - begin;
  Tensor out(t.dtype(), TensorShape(dims));
  const size_t bytes = DTypeSize(t.dtype()) * static_cast<size_t>(row);
  std::memcpy(out.raw_data(), static_cast<const char*>(t.raw_data()) + bytes * begin, bytes * (end - begin));
  return out;
}

double RelDiff(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  auto x = a.flat<float>();
  auto y = b.flat<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(x[i]) - y[i]));
    den = std::max(den, std::abs(static_cast<double>(y[i])));
  }
  return num / std::max(den, 1e-12);
}

// Step `step`'s features: random floats, or (for a model that starts with
// an embedding) token ids in [0, kVocab) as floats, repeating within the
// batch. A test that trains on ids points features_of_step at IdFeatures.
constexpr int kVocab = 40;
Tensor RandomFeatures(int step) { return RandomTensor({kBatch, kExample}, 100 + step); }
Tensor IdFeatures(int step) {
  Tensor t(DType::kFloat32, {kBatch, kExample});
  for (int i = 0; i < kBatch * kExample; ++i) {
    t.flat<float>()[i] = static_cast<float>((i * 7 + step * 3) % 13 * 3 % kVocab);
  }
  return t;
}
Tensor (*features_of_step)(int) = RandomFeatures;

// Step `step`'s global batch (the one SingleProcess trains on), split into
// equal row ranges, one per replica.
std::vector<std::pair<std::string, Tensor>> ReplicaFeeds(const ReplicatedGraph& rg, int step) {
  const Tensor x = features_of_step(step);
  const Tensor y = Labels(kBatch, step);
  const int n = static_cast<int>(rg.replicas.size());
  std::vector<std::pair<std::string, Tensor>> feeds;
  for (int r = 0; r < n; ++r) {
    const int64_t b = kBatch / n * r, e = kBatch / n * (r + 1);
    feeds.emplace_back(rg.replicas[r].features, Rows(x, b, e));
    feeds.emplace_back(rg.replicas[r].labels, Rows(y, b, e));
  }
  return feeds;
}

struct Trained {
  std::vector<Tensor> variables;  // in TrainingGraph::variables order
  std::vector<float> losses;
};

// k steps of the one-replica graph on one task at the global batch (or its
// first `rows` rows).
Trained SingleProcess(const TrainingGraph& tg, int64_t rows = kBatch) {
  auto cluster = *InProcessCluster::Create({"/job:worker/task:0"});
  auto session = MasterSession::Create("single", tg.graph->ToGraphDef(), cluster->workers());
  EXPECT_TRUE(session.ok()) << session.status();
  Trained run;
  std::vector<Tensor> out;
  for (int step = 0; step < kSteps; ++step) {
    const Tensor x = Rows(features_of_step(step), 0, rows);
    const Tensor y = Rows(Labels(kBatch, step), 0, rows);
    EXPECT_TRUE((*session)->Run({{tg.features, x}, {tg.labels, y}}, {tg.loss}, {tg.train_op}, &out).ok());
    run.losses.push_back(out[0].flat<float>()[0]);
  }
  EXPECT_TRUE((*session)->Run({}, tg.variables, {}, &run.variables).ok());
  return run;
}

std::vector<Tensor> Initial(const TrainingGraph& tg) {
  auto cluster = *InProcessCluster::Create({"/job:worker/task:0"});
  auto session = MasterSession::Create("initial", tg.graph->ToGraphDef(), cluster->workers());
  std::vector<Tensor> out;
  EXPECT_TRUE((*session)->Run({}, tg.variables, {}, &out).ok());
  return out;
}

struct Layout {
  std::vector<std::string> tasks;
  StrategyOptions options;
  int devices_per_task = 1;
};

Layout For(StrategySpec::Kind kind, int n) {
  Layout s;
  s.options.kind = kind;
  s.options.fusion_bytes = 64;  // several buckets even for this small model
  switch (kind) {
    case StrategySpec::PARAMETER_SERVER:
      s.tasks = {"/job:ps/task:0", "/job:ps/task:1"};
      s.options.variable_devices = {"/job:ps/task:0/device:CPU:0", "/job:ps/task:1/device:CPU:0"};
      for (int r = 0; r < n; ++r) {
        s.tasks.push_back(absl::StrCat("/job:worker/task:", r));
        s.options.replica_devices.push_back(absl::StrCat("/job:worker/task:", r, "/device:CPU:0"));
      }
      break;
    case StrategySpec::MIRRORED:
    case StrategySpec::CENTRAL_STORAGE:
      s.tasks = {"/job:worker/task:0"};
      s.devices_per_task = n;
      for (int d = 0; d < n; ++d) {
        s.options.replica_devices.push_back(absl::StrCat("/job:worker/task:0/device:CPU:", d));
      }
      s.options.variable_devices = {"/job:worker/task:0/device:CPU:0"};
      break;
    default:
      break;
  }
  return s;
}

Trained Replicated(const TrainingGraph& tg, const Layout& setup, ReplicatedGraph* rg_out = nullptr) {
  auto rg = ApplyStrategy(tg, setup.options);
  EXPECT_TRUE(rg.ok()) << rg.status();
  worker::WorkerOptions wo;
  wo.num_cpu_devices = setup.devices_per_task;
  auto cluster = *InProcessCluster::Create(setup.tasks, wo);
  auto session = MasterSession::Create("replicated", rg->graph->ToGraphDef(), cluster->workers());
  EXPECT_TRUE(session.ok()) << session.status();
  Trained run;
  std::vector<Tensor> out;
  for (int step = 0; step < kSteps; ++step) {
    absl::Status s = (*session)->Run(ReplicaFeeds(*rg, step), {rg->loss}, {rg->train_op}, &out);
    EXPECT_TRUE(s.ok()) << s;
    if (s.ok()) run.losses.push_back(out[0].flat<float>()[0]);
  }
  std::vector<std::string> fetch;
  for (const std::string& v : tg.variables) fetch.push_back(rg->variable_node.at(v));
  EXPECT_TRUE((*session)->Run({}, fetch, {}, &run.variables).ok());
  if (rg_out != nullptr) *rg_out = *std::move(rg);
  return run;
}

// Momentum with weight decay and a warm-up then a cosine decay: each
// replica's copy of every update count must advance once per step for its
// rates to follow single-process training's.
constexpr char kScheduled[] =
    "optimizer { momentum { learning_rate: 0.3 momentum: 0.5 weight_decay: 0.01 } "
    "schedule { warmup_steps: 1 cosine { decay_steps: 2 alpha: 0.1 } } }";

std::string OptimizerLabel(const std::string& optimizer) {
  if (absl::StrContains(optimizer, "schedule")) return "scheduled_momentum";
  return absl::StrContains(optimizer, "adam") ? "adam" : "sgd";
}

class SyncStrategyTest : public ::testing::TestWithParam<std::tuple<StrategySpec::Kind, int, std::string>> {};

TEST_P(SyncStrategyTest, MatchesSingleProcessTrainingAtTheGlobalBatch) {
  const auto [kind, n, optimizer] = GetParam();
  auto tg = LowerJob(MlpJob(optimizer));
  ASSERT_TRUE(tg.ok()) << tg.status();
  const Trained want = SingleProcess(*tg);
  const Trained got = Replicated(*tg, For(kind, n));
  ASSERT_EQ(got.variables.size(), want.variables.size());
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.variables.size(); ++i) {
    EXPECT_LE(RelDiff(got.variables[i], want.variables[i]), 1e-5) << tg->variables[i];
  }
  for (size_t i = 0; i < want.losses.size(); ++i) EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5) << "step " << i;
  // Training moved every variable: the comparison is not of initial states.
  const std::vector<Tensor> initial = Initial(*tg);
  for (size_t i = 0; i < want.variables.size(); ++i) {
    EXPECT_GT(RelDiff(want.variables[i], initial[i]), 1e-4) << tg->variables[i];
  }
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, SyncStrategyTest,
    ::testing::Combine(::testing::Values(StrategySpec::PARAMETER_SERVER, StrategySpec::MIRRORED,
                                         StrategySpec::CENTRAL_STORAGE),
                       ::testing::Values(2, 4),
                       ::testing::Values("optimizer { sgd { learning_rate: 0.3 } }",
                                         "optimizer { adam { learning_rate: 0.01 } }", kScheduled)),
    [](const auto& info) {
      return absl::StrCat(StrategySpec::Kind_Name(std::get<0>(info.param)), "_", std::get<1>(info.param), "_",
                          OptimizerLabel(std::get<2>(info.param)));
    });

// MULTI_WORKER_MIRRORED needs the ring all-reduce between tasks, so its
// replicas run on real worker servers over gRPC on loopback.
class MultiWorkerMirroredTest : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

// kSteps of `tg` under MULTI_WORKER_MIRRORED on n worker servers: each
// replica's variables (in tg.variables order) and the mean losses.
struct MultiWorkerRun {
  std::vector<std::vector<Tensor>> replicas;
  std::vector<float> losses;
};

MultiWorkerRun TrainMultiWorker(const TrainingGraph& tg, int n, bool float16_all_reduce = false) {
  MultiWorkerRun run;
  std::vector<std::unique_ptr<worker::WorkerServer>> servers;
  ClusterDef cluster;
  JobDef* job = cluster.add_job();
  job->set_name("worker");
  for (int i = 0; i < n; ++i) {
    worker::WorkerServerOptions o;
    o.task_index = i;
    o.listen_address = "127.0.0.1:0";
    o.collective_timeout = absl::Seconds(30);
    auto s = worker::StartWorkerServer(o);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return run;
    (*job->mutable_tasks())[i] = (*s)->address();
    servers.push_back(*std::move(s));
  }
  for (auto& s : servers) s->SetCluster(cluster);
  auto cache = WorkerCache::Create(cluster, GrpcWorkerFactory());
  EXPECT_TRUE(cache.ok()) << cache.status();

  StrategyOptions o;
  o.kind = StrategySpec::MULTI_WORKER_MIRRORED;
  o.fusion_bytes = 200;  // several buckets
  o.float16_all_reduce = float16_all_reduce;
  for (int i = 0; i < n; ++i) o.replica_devices.push_back(absl::StrCat("/job:worker/task:", i, "/device:CPU:0"));
  auto rg = ApplyStrategy(tg, o);
  EXPECT_TRUE(rg.ok()) << rg.status();
  if (!rg.ok() || !cache.ok()) return run;
  EXPECT_GT(rg->num_buckets, 1);
  auto session = MasterSession::Create("mwm", rg->graph->ToGraphDef(), cache->get());
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return run;
  std::vector<Tensor> out;
  for (int step = 0; step < kSteps; ++step) {
    absl::Status s = (*session)->Run(ReplicaFeeds(*rg, step), {rg->loss}, {rg->train_op}, &out);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) break;
    run.losses.push_back(out[0].flat<float>()[0]);
  }
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> fetch;
    for (const std::string& v : tg.variables) fetch.push_back(ReplicaName(r, v));
    run.replicas.emplace_back();
    EXPECT_TRUE((*session)->Run({}, fetch, {}, &run.replicas.back()).ok());
  }
  EXPECT_TRUE((*session)->Close().ok());
  // Stopped together, as a cluster stops: each closes its streams to the
  // others, so none waits out its grace period for a peer's stream.
  std::vector<std::thread> stops;
  for (auto& s : servers) stops.emplace_back([&s] { s->Shutdown(); });
  for (auto& t : stops) t.join();
  return run;
}

TEST_P(MultiWorkerMirroredTest, MatchesSingleProcessTrainingAtTheGlobalBatch) {
  const auto [n, optimizer] = GetParam();
  auto tg = LowerJob(MlpJob(optimizer));
  ASSERT_TRUE(tg.ok()) << tg.status();
  const Trained want = SingleProcess(*tg);
  const MultiWorkerRun got = TrainMultiWorker(*tg, n);
  // Every replica's copy ends equal to single-process training.
  ASSERT_EQ(got.replicas.size(), static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(got.replicas[r].size(), want.variables.size());
    for (size_t i = 0; i < want.variables.size(); ++i) {
      EXPECT_LE(RelDiff(got.replicas[r][i], want.variables[i]), 1e-5) << "replica " << r << ": " << tg->variables[i];
    }
  }
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5) << "step " << i;
}

INSTANTIATE_TEST_SUITE_P(Replicas, MultiWorkerMirroredTest,
                         ::testing::Combine(::testing::Values(2, 4),
                                            ::testing::Values("optimizer { sgd { learning_rate: 0.3 } }",
                                                              "optimizer { adam { learning_rate: 0.01 } }",
                                                              kScheduled)),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param), "_workers_",
                                               OptimizerLabel(std::get<1>(info.param)));
                         });

// MlpJob's settings with a model that embeds its kExample ids (kVocab rows
// of width 4) before the classifier.
JobSpec EmbeddingJob(const std::string& optimizer) {
  JobSpec job = MlpJob(optimizer);
  job.clear_model();
  EXPECT_TRUE(google::protobuf::TextFormat::MergeFromString(
      absl::StrCat("model { input_shape: [ 6 ] num_classes: 3 layer { name: \"embed\" embedding { input_dim: ",
                   kVocab, " output_dim: 4 } } layer { flatten {} } layer { dense { units: 3 } } }"),
      &job));
  return job;
}

// An embedding table on a parameter server: each replica sends the rows its
// ids touched (EmbeddingGradRows on the worker, ScatterRows beside the
// table), not the table's dense gradient, and training still matches one
// process at the global batch, synchronous and asynchronous.
TEST(StrategyTest, ParameterServerSendsOnlyAnEmbeddingsTouchedRows) {
  features_of_step = IdFeatures;
  for (const char* optimizer :
       {"optimizer { sgd { learning_rate: 0.3 } }", "optimizer { adam { learning_rate: 0.01 } }"}) {
    SCOPED_TRACE(optimizer);
    auto tg = LowerJob(EmbeddingJob(optimizer));
    ASSERT_TRUE(tg.ok()) << tg.status();
    const Trained want = SingleProcess(*tg);
    ReplicatedGraph rg;
    const Trained got = Replicated(*tg, For(StrategySpec::PARAMETER_SERVER, 2), &rg);
    ASSERT_EQ(got.variables.size(), want.variables.size());
    for (size_t i = 0; i < want.variables.size(); ++i) {
      EXPECT_LE(RelDiff(got.variables[i], want.variables[i]), 1e-6) << tg->variables[i];
    }
    int rows = 0, scattered = 0;
    for (const auto& n : rg.graph->nodes()) {
      if (n == nullptr) continue;
      if (n->op() == "EmbeddingGradRows") {
        ++rows;
        EXPECT_TRUE(absl::StartsWith(n->def().device(), "/job:worker/")) << n->name();
        EXPECT_EQ(*GetIntAttr(n->def(), "num_rows"), kVocab);
      }
      if (n->op() == "ScatterRows") {
        ++scattered;
        EXPECT_TRUE(absl::StartsWith(n->def().device(), "/job:ps/")) << n->name();
      }
      // The dense gradient is left without readers: it is never computed, nor sent.
      if (n->op() == "EmbeddingGrad") {
        EXPECT_TRUE(n->out_edges().empty()) << n->name();
      }
    }
    EXPECT_EQ(rows, 2);
    EXPECT_EQ(scattered, 2);
  }
  // Asynchronous: each replica's own update of the table reads its rows.
  auto tg = LowerJob(EmbeddingJob("optimizer { sgd { learning_rate: 0.3 } }"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  Layout async = For(StrategySpec::PARAMETER_SERVER, 2);
  async.options.sync = false;
  auto rg = ApplyStrategy(*tg, async.options);
  ASSERT_TRUE(rg.ok()) << rg.status();
  int scattered_updates = 0;
  for (const auto& n : rg->graph->nodes()) {
    if (n == nullptr || !absl::StartsWith(n->op(), "Apply")) continue;
    scattered_updates += n->input(n->num_inputs() - 1).node->op() == "ScatterRows" ? 1 : 0;
  }
  EXPECT_EQ(scattered_updates, 2);
  features_of_step = RandomFeatures;
}

// The float16 all-reduce (mixed_precision.float16_all_reduce): every
// gradient bucket travels as float16 through the real ring between worker
// servers. The replicas stay identical to each other, and within float16's
// rounding of one process at the global batch, but not bit for bit: the
// halves were on the wire.
TEST(StrategyTest, Float16AllReduceKeepsReplicasEqualWithinHalfRounding) {
  auto tg = LowerJob(MlpJob("optimizer { adam { learning_rate: 0.01 } }"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  const Trained want = SingleProcess(*tg);
  const MultiWorkerRun got = TrainMultiWorker(*tg, 2, /*float16_all_reduce=*/true);
  ASSERT_EQ(got.replicas.size(), 2u);
  double largest = 0;
  for (size_t i = 0; i < want.variables.size(); ++i) {
    EXPECT_EQ(RelDiff(got.replicas[1][i], got.replicas[0][i]), 0.0) << tg->variables[i];
    const double d = RelDiff(got.replicas[0][i], want.variables[i]);
    EXPECT_LE(d, 2e-2) << tg->variables[i];
    largest = std::max(largest, d);
  }
  EXPECT_GT(largest, 1e-6) << "no rounding: the gradients did not travel as float16";

  StrategyOptions o;
  o.kind = StrategySpec::MULTI_WORKER_MIRRORED;
  o.float16_all_reduce = true;
  o.replica_devices = {"/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"};
  auto rg = ApplyStrategy(*tg, o);
  ASSERT_TRUE(rg.ok()) << rg.status();
  for (int b = 0; b < rg->num_buckets; ++b) {
    const Node* a = rg->graph->FindNode(ReplicaName(1, absl::StrCat("allreduce/bucket_", b)));
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(*GetStringAttrOr(a->def(), "wire_dtype", ""), "float16");
  }
  // GPU replicas carry it too (NCCL's float16 all-reduce, or the host path
  // rounding as the CPU does), a mixed group alike.
  o.replica_devices[1] = "/job:worker/task:1/device:GPU:0";
  auto gpu = ApplyStrategy(*tg, o);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  for (int b = 0; b < gpu->num_buckets; ++b) {
    const Node* a = gpu->graph->FindNode(ReplicaName(1, absl::StrCat("allreduce/bucket_", b)));
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(*GetStringAttrOr(a->def(), "wire_dtype", ""), "float16");
  }
}

// Variables above max_shard_bytes are split into row shards over both ps
// tasks; training still matches one process exactly.
TEST(StrategyTest, RowShardedVariablesMatchSingleProcessTraining) {
  for (const char* optimizer :
       {"optimizer { sgd { learning_rate: 0.3 } }", "optimizer { adam { learning_rate: 0.01 } }"}) {
    SCOPED_TRACE(optimizer);
    auto tg = LowerJob(MlpJob(optimizer));
    ASSERT_TRUE(tg.ok()) << tg.status();
    const Trained want = SingleProcess(*tg);
    Layout layout = For(StrategySpec::PARAMETER_SERVER, 2);
    layout.options.max_shard_bytes = 64;  // the 6x8 and 8x5 kernels split in 3 shards each
    ReplicatedGraph rg;
    const Trained got = Replicated(*tg, layout, &rg);
    ASSERT_EQ(got.variables.size(), want.variables.size());
    for (size_t i = 0; i < want.variables.size(); ++i) {
      EXPECT_LE(RelDiff(got.variables[i], want.variables[i]), 1e-5) << tg->variables[i];
    }
    // The first kernel is three variables of 2 rows, on both ps tasks.
    std::set<std::string> devices;
    int parts = 0;
    for (const auto& n : rg.graph->nodes()) {
      if (n->op() == "Variable" && absl::StartsWith(n->name(), tg->variables[0] + "/part_")) {
        EXPECT_EQ(n->output_shape(0), TensorShape({2, 8})) << n->name();
        devices.insert(n->def().device());
        ++parts;
      }
    }
    EXPECT_EQ(parts, 3);
    EXPECT_EQ(devices.size(), 2u);
  }
}

TEST(StrategyTest, ParameterServerSpreadsVariablesByBytesAndKeepsSlotsTogether) {
  auto tg = LowerJob(MlpJob("optimizer { adam { learning_rate: 0.01 } }"));
  ASSERT_TRUE(tg.ok());
  Layout s = For(StrategySpec::PARAMETER_SERVER, 2);
  auto rg = ApplyStrategy(*tg, s.options);
  ASSERT_TRUE(rg.ok()) << rg.status();
  int64_t load[2] = {0, 0};
  for (const auto& n : rg->graph->nodes()) {
    if (!absl::StartsWith(n->op(), "Apply")) continue;
    // An update sits with every variable it writes.
    for (int i = 0; i + 1 < n->num_inputs(); ++i) {
      EXPECT_EQ(n->input(i).node->def().device(), n->def().device()) << n->name();
    }
    const int64_t bytes = n->input(0).node->output_shape(0).num_elements() * 4;
    load[n->def().device() == s.options.variable_devices[0] ? 0 : 1] += bytes;
  }
  EXPECT_GT(load[0], 0);
  EXPECT_GT(load[1], 0);
  // Balanced: the two ps differ by less than the largest variable (the 6x8
  // kernel, 192 bytes) out of 476 bytes of variables.
  EXPECT_EQ(load[0] + load[1], 476);
  EXPECT_LT(std::abs(load[0] - load[1]), 192);
}

// Each update's control inputs are the model's reads of its variable. A
// replica in another task reads one transferred copy, which the gradient
// already follows, so on a ps those edges (a transfer per replica and step
// each) go; a control input that is no such read stays, and so do the reads
// of a replica in the variable's own task.
TEST(StrategyTest, ParameterServerUpdatesDropOnlyTheControlInputsTheirGradientsImply) {
  auto tg = LowerJob(MlpJob("optimizer { adam { learning_rate: 0.01 } }"));
  ASSERT_TRUE(tg.ok());
  ASSERT_FALSE(tg->correct.empty());
  // A control input that reads no variable: the accuracy metric, on one update.
  GraphDef def = tg->graph->ToGraphDef();
  const std::string metric(absl::string_view(tg->correct).substr(0, tg->correct.find(':')));
  int reads = 0;
  std::string marked;
  for (NodeDef& n : *def.mutable_node()) {
    if (!absl::StartsWith(n.op(), "Apply")) continue;
    for (const std::string& in : n.input()) reads += absl::StartsWith(in, "^") ? 1 : 0;
    if (marked.empty()) {
      marked = n.name();
      n.add_input("^" + metric);
    }
  }
  ASSERT_GT(reads, 0) << "the one-replica graph's updates follow their reads";
  auto g = Graph::FromGraphDef(def);
  ASSERT_TRUE(g.ok()) << g.status();
  tg->graph = *std::move(g);
  auto control_inputs = [&](const Layout& s, bool metric_only) {
    auto rg = ApplyStrategy(*tg, s.options);
    EXPECT_TRUE(rg.ok()) << rg.status();
    int kept = 0;
    if (!rg.ok()) return kept;
    for (const auto& n : rg->graph->nodes()) {
      if (!absl::StartsWith(n->op(), "Apply")) continue;
      for (const std::string& in : n->def().input()) {
        if (!absl::StartsWith(in, "^")) continue;
        ++kept;
        if (!metric_only) continue;
        EXPECT_TRUE(absl::EndsWith(n->name(), marked)) << n->name() << " keeps " << in;
        EXPECT_TRUE(absl::EndsWith(in, "/" + metric)) << n->name() << " keeps " << in;
      }
    }
    return kept;
  };
  for (bool sync : {true, false}) {
    Layout s = For(StrategySpec::PARAMETER_SERVER, 2);
    s.options.sync = sync;
    // Sync: the one update follows both replicas' metric; async: each
    // replica's update follows its own.
    EXPECT_EQ(control_inputs(s, /*metric_only=*/true), 2) << (sync ? "sync" : "async");
  }
  // CENTRAL_STORAGE: replica 0 computes on the variables' own device, so its
  // reads that no gradient follows (each layer's input gradient reads the
  // kernel) must stay.
  const int kept = control_inputs(For(StrategySpec::CENTRAL_STORAGE, 2), /*metric_only=*/false);
  EXPECT_GT(kept, 2);
}

// An async or k-of-N replica's step targets its updates where they run, on
// the ps, so that no control signal crosses back to the replica's train op
// (one transfer per update and step); that op still names the same step.
TEST(StrategyTest, AsyncAndKOfNReplicasTargetTheirUpdatesOnThePs) {
  auto tg = LowerJob(MlpJob("optimizer { sgd { learning_rate: 0.1 } }"));
  ASSERT_TRUE(tg.ok());
  for (int k : {0, 1}) {
    Layout s = For(StrategySpec::PARAMETER_SERVER, 2);
    s.options.sync = k > 0;
    s.options.replicas_to_aggregate = k;
    auto rg = ApplyStrategy(*tg, s.options);
    ASSERT_TRUE(rg.ok()) << rg.status();
    ASSERT_EQ(rg->replicas.size(), 2u);
    for (size_t r = 0; r < rg->replicas.size(); ++r) {
      const ReplicaNames& names = rg->replicas[r];
      const std::vector<std::string> targets = ReplicaTargets(names);
      ASSERT_EQ(targets, names.train_targets) << "k=" << k;
      const Node* train = rg->graph->FindNode(names.train_op);
      ASSERT_NE(train, nullptr);
      // The targets are exactly what the train op waits for.
      std::set<std::string> waited;
      for (const Node* c : train->control_inputs()) waited.insert(c->name());
      EXPECT_EQ(std::set<std::string>(targets.begin(), targets.end()), waited) << "k=" << k << " replica " << r;
      for (const std::string& t : targets) {
        const Node* n = rg->graph->FindNode(t);
        ASSERT_NE(n, nullptr) << t;
        EXPECT_TRUE(absl::StartsWith(n->def().device(), "/job:ps/")) << t << " on " << n->def().device();
      }
    }
  }
  // Strategies without such targets step through train_op.
  ReplicaNames plain;
  plain.train_op = "train";
  EXPECT_EQ(ReplicaTargets(plain), std::vector<std::string>{"train"});
}

TEST(StrategyTest, BadOptionsAreInvalidArgument) {
  auto tg = LowerJob(MlpJob("optimizer { sgd { learning_rate: 0.3 } }"));
  ASSERT_TRUE(tg.ok());
  StrategyOptions o;
  o.kind = StrategySpec::NONE;
  o.replica_devices = {"/job:worker/task:0/device:CPU:0"};
  EXPECT_EQ(ApplyStrategy(*tg, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.kind = StrategySpec::PARAMETER_SERVER;  // no variable devices
  auto s = ApplyStrategy(*tg, o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "PARAMETER_SERVER")) << s.status();
  o.kind = StrategySpec::MULTI_WORKER_MIRRORED;
  o.replica_devices = {"/job:worker/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:1"};
  s = ApplyStrategy(*tg, o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "MIRRORED")) << s.status();
}

TEST(StrategyTest, MultiWorkerMirroredFusesGradientsIntoOrderedBuckets) {
  auto tg = LowerJob(MlpJob("optimizer { sgd { learning_rate: 0.3 } }"));
  ASSERT_TRUE(tg.ok());
  StrategyOptions o;
  o.kind = StrategySpec::MULTI_WORKER_MIRRORED;
  o.replica_devices = {"/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"};
  o.fusion_bytes = 200;  // kernels 192, 160, 60 bytes; biases 32, 20, 12
  auto rg = ApplyStrategy(*tg, o);
  ASSERT_TRUE(rg.ok()) << rg.status();
  ASSERT_GT(rg->num_buckets, 1);
  for (int b = 0; b < rg->num_buckets; ++b) {
    const Node* a0 = rg->graph->FindNode(ReplicaName(0, absl::StrCat("allreduce/bucket_", b)));
    const Node* a1 = rg->graph->FindNode(ReplicaName(1, absl::StrCat("allreduce/bucket_", b)));
    ASSERT_NE(a0, nullptr);
    ASSERT_NE(a1, nullptr);
    // Both replicas reduce the same gradients, in the same order, under one key.
    ASSERT_EQ(a0->num_inputs(), a1->num_inputs());
    int64_t bytes = 0;
    for (int i = 0; i < a0->num_inputs(); ++i) {
      EXPECT_EQ(ReplicaName(0, a1->input(i).node->name().substr(std::string("replica_1/").size())),
                a0->input(i).node->name());
      EXPECT_EQ(a0->output_shape(i), a1->output_shape(i));
      bytes += a0->output_shape(i).num_elements() * 4;
    }
    EXPECT_TRUE(a0->num_inputs() == 1 || bytes <= 200) << "bucket " << b << ": " << bytes << " bytes";
    EXPECT_EQ(a0->def().device(), o.replica_devices[0]);
    EXPECT_EQ(a1->def().device(), o.replica_devices[1]);
  }
  // Each task's copy of a variable keeps the variable's name.
  const Node* w1 = rg->graph->FindNode(ReplicaName(1, tg->variables[0]));
  ASSERT_NE(w1, nullptr);
  EXPECT_EQ(w1->def().attr().at("shared_name").s(), tg->variables[0]);
}

// Batch norm's moving statistics are updates whose "gradient" is the batch
// statistic: every strategy treats them as it treats gradients. Under
// MULTI_WORKER_MIRRORED each replica's update reads the mean over the
// replicas, so every copy keeps the same statistics; under the parameter
// server the update sits with its variable on the ps.
// dense (no activation), batch_norm (RELU), dense, dense.
JobSpec BatchNormJob(bool synchronized) {
  JobSpec job = MlpJob("optimizer { adam { learning_rate: 0.01 } }");
  job.mutable_model()->mutable_layer(0)->mutable_dense()->set_activation(ACTIVATION_NONE);
  job.mutable_model()->mutable_layer(0)->mutable_dense()->set_no_bias(true);  // beta is the bias
  LayerSpec bn;
  bn.set_name("bn");
  bn.mutable_batch_norm()->set_activation(RELU);
  bn.mutable_batch_norm()->set_synchronized(synchronized);
  job.mutable_model()->mutable_layer()->Add(std::move(bn));
  job.mutable_model()->mutable_layer()->SwapElements(1, 3);  // dense, bn, dense, dense
  job.mutable_model()->mutable_layer()->SwapElements(2, 3);
  return job;
}

TEST(StrategyTest, MovingStatisticsMeetAcrossReplicasLikeGradients) {
  JobSpec job = BatchNormJob(false);
  auto tg = LowerJob(job);
  ASSERT_TRUE(tg.ok()) << tg.status();
  StrategyOptions o;
  o.kind = StrategySpec::MULTI_WORKER_MIRRORED;
  o.replica_devices = {"/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"};
  auto rg = ApplyStrategy(*tg, o);
  ASSERT_TRUE(rg.ok()) << rg.status();
  for (int r = 0; r < 2; ++r) {
    for (const char* stat : {"bn/moving_mean_update", "bn/moving_variance_update"}) {
      const Node* u = rg->graph->FindNode(ReplicaName(r, stat));
      ASSERT_NE(u, nullptr) << ReplicaName(r, stat);
      const Node* ar = u->input(1).node;
      EXPECT_EQ(ar->op(), "CollectiveAllReduce") << u->name();
      EXPECT_TRUE(ar->def().attr().at("mean").b()) << ar->name();
      EXPECT_EQ(ar->def().device(), o.replica_devices[r]);
    }
  }
  StrategyOptions ps;
  ps.kind = StrategySpec::PARAMETER_SERVER;
  ps.sync = true;
  ps.replica_devices = o.replica_devices;
  ps.variable_devices = {"/job:ps/task:0/device:CPU:0"};
  auto prg = ApplyStrategy(*tg, ps);
  ASSERT_TRUE(prg.ok()) << prg.status();
  int on_ps = 0;
  for (const auto& n : prg->graph->nodes()) {
    if (n->op() != "ApplyMovingAverage") continue;
    EXPECT_EQ(n->def().device(), ps.variable_devices[0]) << n->name();
    ++on_ps;
  }
  EXPECT_GE(on_ps, 2);
}

// The CollectiveAllReduce nodes of a replicated graph.
std::vector<const Node*> AllReduces(const ReplicatedGraph& rg) {
  std::vector<const Node*> out;
  for (const auto& n : rg.graph->nodes()) {
    if (n->op() == "CollectiveAllReduce") out.push_back(n.get());
  }
  return out;
}

// Ids "nccl-id-1", "nccl-id-2", ..., counted in *calls.
NcclIdGenerator FakeNcclIds(int* calls) {
  return [calls]() -> absl::StatusOr<std::string> { return absl::StrCat("nccl-id-", ++*calls); };
}

// The largest difference between `got` and `want`, variable by variable.
double MaxRelDiff(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  double worst = 0;
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) worst = std::max(worst, RelDiff(got[i], want[i]));
  return worst;
}

// Synchronised batch norm: 2 replicas of 4 rows train as one process does
// with plain batch norm on the 8 rows, under every synchronous strategy,
// moving statistics included. Plain batch norm on the replicas does not:
// each normalises with its own 4 rows, which is what the comparison sees.
class SyncBatchNormTest : public ::testing::TestWithParam<StrategySpec::Kind> {};

TEST_P(SyncBatchNormTest, MatchesPlainBatchNormInOneProcessAtTheGlobalBatch) {
  const StrategySpec::Kind kind = GetParam();
  auto plain = LowerJob(BatchNormJob(false));
  auto synced = LowerJob(BatchNormJob(true));
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(synced.ok()) << synced.status();
  ASSERT_EQ(plain->variables, synced->variables);
  const Trained want = SingleProcess(*plain);
  const std::vector<Tensor> initial = Initial(*plain);
  EXPECT_GT(MaxRelDiff(want.variables, initial), 1e-3);  // training moved them
  auto train = [&](const TrainingGraph& tg) -> std::vector<std::vector<Tensor>> {
    if (kind == StrategySpec::MULTI_WORKER_MIRRORED) return TrainMultiWorker(tg, 2).replicas;
    Layout layout = For(kind, 2);
    layout.options.sync = true;
    return {Replicated(tg, layout).variables};
  };
  const std::vector<std::vector<Tensor>> got = train(*synced);
  ASSERT_FALSE(got.empty());
  for (size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].size(), want.variables.size());
    for (size_t i = 0; i < want.variables.size(); ++i) {
      EXPECT_LE(RelDiff(got[r][i], want.variables[i]), 1e-5) << "replica " << r << ": " << synced->variables[i];
    }
  }
  const std::vector<std::vector<Tensor>> local = train(*plain);
  ASSERT_FALSE(local.empty());
  EXPECT_GT(MaxRelDiff(local[0], want.variables), 1e-4) << "per-replica statistics should differ";
}

INSTANTIATE_TEST_SUITE_P(Strategies, SyncBatchNormTest,
                         ::testing::Values(StrategySpec::MULTI_WORKER_MIRRORED, StrategySpec::MIRRORED,
                                           StrategySpec::CENTRAL_STORAGE, StrategySpec::PARAMETER_SERVER),
                         [](const auto& info) { return StrategySpec::Kind_Name(info.param); });

TEST(StrategyTest, SynchronizedBatchNormNeedsReplicasThatStepTogether) {
  auto synced = LowerJob(BatchNormJob(true));
  ASSERT_TRUE(synced.ok()) << synced.status();
  // Asynchronous replicas (k-of-N ones are refused for the moving
  // averages' updates already).
  Layout layout = For(StrategySpec::PARAMETER_SERVER, 2);
  layout.options.sync = false;
  auto rg = ApplyStrategy(*synced, layout.options);
  EXPECT_EQ(rg.status().code(), absl::StatusCode::kInvalidArgument) << rg.status();
  EXPECT_TRUE(::weft::testing::StatusHas(rg.status(), "bn/")) << rg.status();
  EXPECT_TRUE(::weft::testing::StatusHas(rg.status(), "synchronized batch_norm")) << rg.status();
  // One replica needs no meeting: the sums stay the identity.
  Layout one = For(StrategySpec::PARAMETER_SERVER, 1);
  one.options.sync = false;
  EXPECT_TRUE(ApplyStrategy(*synced, one.options).ok());
}

// On GPUs every all-reduce of a replica shares one NCCL communicator, so
// the batch norm's sums join the gradients' buckets in one chain per
// replica: the same on every replica, and one the dataflow allows
// (ApplyStrategy builds the graph, which refuses a cycle).
TEST(StrategyTest, SynchronizedBatchNormSumsJoinTheNcclChainInDataflowOrder) {
  auto synced = LowerJob(BatchNormJob(true));
  ASSERT_TRUE(synced.ok()) << synced.status();
  int calls = 0;
  StrategyOptions o;
  o.kind = StrategySpec::MULTI_WORKER_MIRRORED;
  for (int t = 0; t < 2; ++t) o.replica_devices.push_back(absl::StrCat("/job:worker/task:", t, "/device:GPU:0"));
  o.fusion_bytes = 64;
  o.new_nccl_id = FakeNcclIds(&calls);
  auto rg = ApplyStrategy(*synced, o);
  ASSERT_TRUE(rg.ok()) << rg.status();
  EXPECT_EQ(calls, 1);
  // Each replica's chain, first to last, as names without the replica.
  std::vector<std::vector<std::string>> chains(2);
  for (int r = 0; r < 2; ++r) {
    std::map<std::string, std::string> next;  // all-reduce -> the one chained after it
    std::set<std::string> chained_after;
    const std::string prefix = ReplicaName(r, "");
    for (const Node* n : AllReduces(*rg)) {
      if (!absl::StartsWith(n->name(), prefix)) continue;
      for (const std::string& in : n->def().input()) {
        if (!absl::StartsWith(in, "^" + prefix)) continue;
        next[in.substr(1)] = n->name();
        chained_after.insert(n->name());
      }
    }
    std::string at;
    for (const Node* n : AllReduces(*rg)) {
      if (absl::StartsWith(n->name(), prefix) && !chained_after.count(n->name())) at = n->name();
    }
    for (; !at.empty(); at = next.count(at) ? next[at] : "") chains[r].push_back(at.substr(prefix.size()));
  }
  EXPECT_EQ(chains[0], chains[1]);
  ASSERT_EQ(chains[0].size(), AllReduces(*rg).size() / 2) << "every all-reduce in one chain";
  // The forward pass's sums come first: nothing else can run before them.
  const Node* first = rg->graph->FindNode(ReplicaName(0, chains[0][0]));
  ASSERT_NE(first, nullptr);
  EXPECT_FALSE(first->def().attr().at("mean").b()) << first->name();
  EXPECT_EQ(GetIntAttr(first->def(), "instance_key").value_or(0), rg->num_buckets + 1);
}

// Gradient accumulation: k micro-batch passes of 8 / k rows, one after
// another, apply the 8-row batch's update; under MULTI_WORKER_MIRRORED each
// replica splits its own 4 rows. Adam amplifies any difference in the
// gradient, so a wrong mean or a missing pass shows.
class GradientAccumulationTest : public ::testing::TestWithParam<int> {};

TEST_P(GradientAccumulationTest, MatchesOnePassOverTheBatch) {
  const int k = GetParam();
  // SGD sees a gradient's scale (a sum for a mean), Adam mostly its direction.
  for (const char* optimizer : {"sgd { learning_rate: 0.3 }", "adam { learning_rate: 0.01 }"}) {
    SCOPED_TRACE(optimizer);
    auto once = LowerJob(MlpJob(absl::StrCat("optimizer { ", optimizer, " }")));
    auto micro =
        LowerJob(MlpJob(absl::StrCat("optimizer { ", optimizer, " gradient_accumulation_steps: ", k, " }")));
    ASSERT_TRUE(once.ok()) << once.status();
    ASSERT_TRUE(micro.ok()) << micro.status();
    ASSERT_EQ(once->variables, micro->variables);
    const Trained want = SingleProcess(*once);
    const Trained got = SingleProcess(*micro);
    EXPECT_LE(MaxRelDiff(got.variables, want.variables), 1e-5);
    for (size_t i = 0; i < want.losses.size(); ++i) EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5) << i;
    // Pass i waits for pass i - 1's gradients: one pass's activations at a time.
    for (int i = 1; i < k; ++i) {
      const Node* slice = micro->graph->FindNode(absl::StrCat("micro_", i, "/features"));
      ASSERT_NE(slice, nullptr);
      EXPECT_EQ(slice->op(), "MicroBatch");
      EXPECT_GE(slice->control_inputs().size(), micro->variables.size()) << slice->name();
    }
    if (absl::StrContains(optimizer, "adam")) continue;
    const MultiWorkerRun mwm = TrainMultiWorker(*micro, 2);
    ASSERT_EQ(mwm.replicas.size(), 2u);
    for (const auto& replica : mwm.replicas) EXPECT_LE(MaxRelDiff(replica, want.variables), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(MicroBatches, GradientAccumulationTest, ::testing::Values(2, 4));

// Each pass's batch norm takes its micro-batch's statistics; one update
// per moving statistic blends in their mean.
TEST(StrategyTest, GradientAccumulationBlendsTheMeanOfItsPassesStatistics) {
  JobSpec job = BatchNormJob(false);
  job.mutable_optimizer()->set_gradient_accumulation_steps(2);
  auto tg = LowerJob(job);
  ASSERT_TRUE(tg.ok()) << tg.status();
  int updates = 0;
  for (const auto& n : tg->graph->nodes()) updates += n->op() == "ApplyMovingAverage";
  EXPECT_EQ(updates, 2);
  const Node* u = tg->graph->FindNode("bn/moving_mean_update");
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->input(1).node->op(), "Mul");  // (pass 0 + pass 1) / 2
  // One step moves the moving mean from its zeros.
  auto cluster = *InProcessCluster::Create({"/job:worker/task:0"});
  auto session = MasterSession::Create("bn", tg->graph->ToGraphDef(), cluster->workers());
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<Tensor> out;
  ASSERT_TRUE((*session)
                  ->Run({{tg->features, RandomTensor({kBatch, kExample}, 100)}, {tg->labels, Labels(kBatch, 0)}},
                        {}, {tg->train_op}, &out)
                  .ok());
  ASSERT_TRUE((*session)->Run({}, {"bn/moving_mean"}, {}, &out).ok());
  double moved = 0;
  for (float v : out[0].flat<float>()) moved = std::max(moved, std::abs(static_cast<double>(v)));
  EXPECT_GT(moved, 1e-4);
}

TEST(StrategyTest, GradientAccumulationStepsMustSplitTheBatch) {
  auto uneven = LowerJob(MlpJob("optimizer { sgd { learning_rate: 0.1 } gradient_accumulation_steps: 3 }"));
  EXPECT_EQ(uneven.status().code(), absl::StatusCode::kInvalidArgument) << uneven.status();
  EXPECT_TRUE(::weft::testing::StatusHas(uneven.status(), "gradient_accumulation_steps 3 must divide batch_size 8"))
      << uneven.status();
  // 8 rows split into 4 on each of 2 replicas, which 8 micro-batches cannot split.
  auto micro = LowerJob(MlpJob("optimizer { sgd { learning_rate: 0.1 } gradient_accumulation_steps: 8 }"));
  ASSERT_TRUE(micro.ok()) << micro.status();
  auto cluster = *InProcessCluster::Create({"/job:worker/task:0"});
  auto session = MasterSession::Create("uneven", micro->graph->ToGraphDef(), cluster->workers());
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<Tensor> out;
  absl::Status s = (*session)->Run({{micro->features, RandomTensor({4, kExample}, 1)}, {micro->labels, Labels(4, 0)}},
                                   {micro->loss}, {micro->train_op}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(::weft::testing::StatusHas(s, "does not split into 8 equal micro-batches")) << s;
}

TEST(StrategyTest, MultiWorkerMirroredOnGpusGivesEachGroupOneNcclIdAndOneBucketOrder) {
  auto tg = LowerJob(MlpJob("optimizer { sgd { learning_rate: 0.3 } }"));
  ASSERT_TRUE(tg.ok());
  int calls = 0;
  StrategyOptions o;
  o.kind = StrategySpec::MULTI_WORKER_MIRRORED;
  for (int t = 0; t < 3; ++t) o.replica_devices.push_back(absl::StrCat("/job:worker/task:", t, "/device:GPU:0"));
  o.fusion_bytes = 200;  // several buckets
  o.new_nccl_id = FakeNcclIds(&calls);
  auto rg = ApplyStrategy(*tg, o);
  ASSERT_TRUE(rg.ok()) << rg.status();
  ASSERT_GT(rg->num_buckets, 1);
  EXPECT_EQ(calls, 1);  // one group, so one id and one communicator per GPU
  EXPECT_EQ(rg->num_nccl_groups, 1);
  EXPECT_TRUE(rg->nccl_id_status.ok());
  const std::vector<const Node*> all_reduces = AllReduces(*rg);
  ASSERT_EQ(all_reduces.size(), 3u * rg->num_buckets);
  for (const Node* n : all_reduces) {
    EXPECT_EQ(*GetStringAttrOr(n->def(), "nccl_unique_id", ""), "nccl-id-1") << n->name();
  }
  // Every replica issues its buckets in one order: the last first, each
  // after the one above it.
  for (int r = 0; r < 3; ++r) {
    for (int b = 0; b + 1 < rg->num_buckets; ++b) {
      const Node* n = rg->graph->FindNode(ReplicaName(r, absl::StrCat("allreduce/bucket_", b)));
      ASSERT_NE(n, nullptr);
      const std::string after = "^" + ReplicaName(r, absl::StrCat("allreduce/bucket_", b + 1));
      EXPECT_NE(std::find(n->def().input().begin(), n->def().input().end(), after), n->def().input().end())
          << n->name() << " does not follow " << after;
    }
  }

  // Another group (another job) gets another id.
  o.group_key = 2;
  auto other = ApplyStrategy(*tg, o);
  ASSERT_TRUE(other.ok()) << other.status();
  for (const Node* n : AllReduces(*other)) {
    EXPECT_EQ(*GetStringAttrOr(n->def(), "nccl_unique_id", ""), "nccl-id-2") << n->name();
  }
}

TEST(StrategyTest, CpuMixedOrOneReplicaGroupsGetNoNcclId) {
  auto tg = LowerJob(MlpJob("optimizer { sgd { learning_rate: 0.3 } }"));
  ASSERT_TRUE(tg.ok());
  const std::vector<std::vector<std::string>> layouts = {
      {"/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"},
      {"/job:worker/task:0/device:GPU:0", "/job:worker/task:1/device:CPU:0"},
      {"/job:worker/task:0/device:GPU:0"},
  };
  for (const std::vector<std::string>& devices : layouts) {
    SCOPED_TRACE(absl::StrJoin(devices, ","));
    int calls = 0;
    StrategyOptions o;
    o.kind = StrategySpec::MULTI_WORKER_MIRRORED;
    o.replica_devices = devices;
    o.fusion_bytes = 200;
    o.new_nccl_id = FakeNcclIds(&calls);
    auto rg = ApplyStrategy(*tg, o);
    ASSERT_TRUE(rg.ok()) << rg.status();
    EXPECT_EQ(calls, 0);
    EXPECT_EQ(rg->num_nccl_groups, 0);
    for (const Node* n : AllReduces(*rg)) {
      EXPECT_FALSE(n->def().attr().contains("nccl_unique_id")) << n->name();
      for (const std::string& in : n->def().input()) EXPECT_FALSE(absl::StartsWith(in, "^")) << n->name();
    }
  }
}

TEST(StrategyTest, AFailedNcclIdLeavesTheGroupOnTheRingAndSaysWhy) {
  auto tg = LowerJob(MlpJob("optimizer { sgd { learning_rate: 0.3 } }"));
  ASSERT_TRUE(tg.ok());
  StrategyOptions o;
  o.kind = StrategySpec::MULTI_WORKER_MIRRORED;
  o.replica_devices = {"/job:worker/task:0/device:GPU:0", "/job:worker/task:1/device:GPU:0"};
  o.new_nccl_id = []() -> absl::StatusOr<std::string> { return absl::UnavailableError("no network interface"); };
  auto rg = ApplyStrategy(*tg, o);
  ASSERT_TRUE(rg.ok()) << rg.status();
  EXPECT_EQ(rg->num_nccl_groups, 0);
  EXPECT_EQ(rg->nccl_id_status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(rg->nccl_id_status.message(), "no network interface")) << rg->nccl_id_status;
  EXPECT_TRUE(absl::StrContains(rg->nccl_id_status.message(), "/job:worker/task:1")) << rg->nccl_id_status;
  for (const Node* n : AllReduces(*rg)) EXPECT_FALSE(n->def().attr().contains("nccl_unique_id")) << n->name();
}

TEST(StrategyTest, MirroredOnGpusAllReducesInProcessThroughNccl) {
  auto tg = LowerJob(MlpJob("optimizer { sgd { learning_rate: 0.3 } }"));
  ASSERT_TRUE(tg.ok());
  int calls = 0;
  StrategyOptions o;
  o.kind = StrategySpec::MIRRORED;
  o.replica_devices = {"/job:worker/task:0/device:GPU:0", "/job:worker/task:0/device:GPU:1"};
  o.variable_devices = {"/job:worker/task:0/device:CPU:0"};
  o.fusion_bytes = 200;  // several buckets
  o.new_nccl_id = FakeNcclIds(&calls);
  auto rg = ApplyStrategy(*tg, o);
  ASSERT_TRUE(rg.ok()) << rg.status();
  ASSERT_GT(rg->num_buckets, 1);
  EXPECT_EQ(calls, 0);  // an in-process group needs no unique id
  const std::vector<const Node*> all_reduces = AllReduces(*rg);
  ASSERT_EQ(all_reduces.size(), 2u * rg->num_buckets);
  for (const Node* n : all_reduces) {
    EXPECT_EQ(*GetStringAttrOr(n->def(), "group_devices", ""),
              "/job:worker/task:0/device:GPU:0,/job:worker/task:0/device:GPU:1")
        << n->name();
    EXPECT_FALSE(n->def().attr().contains("group_tasks")) << n->name();
    EXPECT_TRUE(*GetBoolAttrOr(n->def(), "mean", false)) << n->name();
  }
  // Each replica's update reads its own replica's all-reduce, and no
  // gradient is summed on one device (the loss still is, for reporting).
  int updates = 0;
  for (const auto& n : rg->graph->nodes()) {
    if (n->def().op() == "AddN") {
      EXPECT_TRUE(absl::StartsWith(n->name(), "loss/")) << n->name();
    }
    if (!absl::StrContains(n->def().op(), "Apply")) continue;
    const std::string replica = n->name().substr(0, n->name().find('/') + 1);
    bool reads_own = false;
    for (const std::string& in : n->def().input()) {
      reads_own |= absl::StartsWith(in, replica + "allreduce/bucket_");
    }
    EXPECT_TRUE(reads_own) << n->name();
    ++updates;
  }
  EXPECT_GE(updates, 2 * 4);  // two replicas' updates of the MLP's weights and biases
  // Copies of a variable in one task: distinct, initialised alike.
  for (const auto& n : rg->graph->nodes()) {
    if (n->def().op() != "Variable") continue;
    EXPECT_TRUE(n->def().attr().contains("init_name")) << n->name();
    EXPECT_FALSE(n->def().attr().contains("shared_name")) << n->name();
  }
}

TEST(StrategyTest, MirroredCrossDeviceOpsChoosesHowGradientsMeet) {
  auto tg = LowerJob(MlpJob("optimizer { sgd { learning_rate: 0.3 } }"));
  ASSERT_TRUE(tg.ok());
  StrategyOptions o;
  o.kind = StrategySpec::MIRRORED;
  o.variable_devices = {"/job:worker/task:0/device:CPU:0"};
  // CPU devices, or a GPU shared with the CPU, sum on the first device.
  for (const std::vector<std::string>& devices : std::vector<std::vector<std::string>>{
           {"/job:worker/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:1"},
           {"/job:worker/task:0/device:GPU:0", "/job:worker/task:0/device:CPU:0"}}) {
    o.replica_devices = devices;
    auto rg = ApplyStrategy(*tg, o);
    ASSERT_TRUE(rg.ok()) << rg.status();
    EXPECT_TRUE(AllReduces(*rg).empty());
    // ... and NCCL cannot be had there.
    o.cross_device_ops = StrategySpec::NCCL;
    auto nccl = ApplyStrategy(*tg, o);
    EXPECT_EQ(nccl.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(nccl.status().message(), "needs every replica on a GPU of its own"))
        << nccl.status();
    o.cross_device_ops = StrategySpec::AUTO;
  }
  // GPUs, but told to sum on the first one.
  o.replica_devices = {"/job:worker/task:0/device:GPU:0", "/job:worker/task:0/device:GPU:1"};
  o.cross_device_ops = StrategySpec::REDUCE_TO_FIRST_DEVICE;
  auto rg = ApplyStrategy(*tg, o);
  ASSERT_TRUE(rg.ok()) << rg.status();
  EXPECT_TRUE(AllReduces(*rg).empty());
  // The option belongs to MIRRORED alone.
  o.kind = StrategySpec::MULTI_WORKER_MIRRORED;
  o.replica_devices = {"/job:worker/task:0/device:GPU:0", "/job:worker/task:1/device:GPU:0"};
  o.cross_device_ops = StrategySpec::NCCL;
  auto mwm = ApplyStrategy(*tg, o);
  EXPECT_EQ(mwm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(mwm.status().message(), "is for MIRRORED, not MULTI_WORKER_MIRRORED"))
      << mwm.status();
}

// Asynchronous replicas step concurrently; the ps serialises each
// variable's updates, so after N replicas x K steps of a constant gradient
// the variable has moved by exactly N*K*lr*grad.
TEST(StrategyTest, AsyncParameterServerLosesNoUpdate) {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {-1, 4}, "features");
  b.Placeholder(DType::kInt32, {-1}, "labels");
  Output w = b.Variable("w", DType::kFloat32, {4096}, "zeros");
  Output loss = b.Op("Sum", {x}, {}, "loss");
  Output grad = b.Op("Add", {b.Op("Mul", {w, b.ScalarConst(0.0f)}), b.ScalarConst(1.0f)}, {}, "grad");
  b.Op("ApplyGradientDescent", {w, grad}, {Attr("learning_rate", 1.0f)}, "update");
  b.Op("NoOp", {}, {}, "train");
  ASSERT_TRUE(b.status().ok()) << b.status();
  TrainingGraph tg;
  tg.graph = *Graph::FromGraphDef(g.ToGraphDef());
  tg.features = "features";
  tg.labels = "labels";
  tg.loss = "loss";
  tg.train_op = "train";
  tg.variables = {"w"};
  (void)loss;

  constexpr int kReplicas = 3, kEach = 40;
  Layout s = For(StrategySpec::PARAMETER_SERVER, kReplicas);
  s.options.sync = false;
  auto rg = ApplyStrategy(tg, s.options);
  ASSERT_TRUE(rg.ok()) << rg.status();
  EXPECT_TRUE(rg->train_op.empty());
  auto cluster = *InProcessCluster::Create(s.tasks);
  auto session = MasterSession::Create("async", rg->graph->ToGraphDef(), cluster->workers());
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<std::thread> replicas;
  std::atomic<int> failures{0};
  for (int r = 0; r < kReplicas; ++r) {
    replicas.emplace_back([&, r] {
      std::vector<Tensor> out;
      for (int i = 0; i < kEach; ++i) {
        absl::Status st = (*session)->Run({{rg->replicas[r].features, RandomTensor({2, 4}, i)}},
                                          {rg->replicas[r].loss}, {rg->replicas[r].train_op}, &out);
        if (!st.ok()) ++failures;
      }
    });
  }
  for (auto& t : replicas) t.join();
  EXPECT_EQ(failures.load(), 0);
  std::vector<Tensor> got;
  ASSERT_TRUE((*session)->Run({}, {rg->variable_node.at("w")}, {}, &got).ok());
  for (float v : got[0].flat<float>()) ASSERT_EQ(v, -static_cast<float>(kReplicas * kEach));
}

// Sync PS with replicas_to_aggregate: replicas step on their own threads,
// each Run one replica's step, as the job runner's replica threads do.
struct Accumulating {
  std::unique_ptr<InProcessCluster> cluster;
  std::unique_ptr<MasterSession> session;
  ReplicatedGraph rg;

  Accumulating(const TrainingGraph& tg, int n, int k) {
    Layout layout = For(StrategySpec::PARAMETER_SERVER, n);
    layout.options.replicas_to_aggregate = k;
    auto g = ApplyStrategy(tg, layout.options);
    EXPECT_TRUE(g.ok()) << g.status();
    rg = *std::move(g);
    cluster = *InProcessCluster::Create(layout.tasks);
    auto s = MasterSession::Create("accumulating", rg.graph->ToGraphDef(), cluster->workers());
    EXPECT_TRUE(s.ok()) << s.status();
    session = *std::move(s);
  }

  // Replica r's step on its rows of step `step`'s global batch; the pushes'
  // outcomes go to *outcomes. `extra` feeds more tensors (a stale step).
  absl::Status Step(int r, int step, std::vector<int64_t>* outcomes, std::vector<float>* loss = nullptr,
                    const std::vector<std::pair<std::string, Tensor>>& extra = {}) {
    const auto all = ReplicaFeeds(rg, step);
    std::vector<std::pair<std::string, Tensor>> feeds = {all[2 * r], all[2 * r + 1]};
    for (const auto& f : extra) feeds.push_back(f);
    std::vector<std::string> fetches = {rg.replicas[r].loss};
    for (const std::string& o : rg.replicas[r].push_outcomes) fetches.push_back(o);
    std::vector<Tensor> out;
    RETURN_IF_ERROR(session->Run(feeds, fetches, {rg.replicas[r].train_op}, &out));
    if (loss != nullptr) loss->push_back(out[0].data<float>()[0]);
    outcomes->clear();
    for (size_t i = 1; i < out.size(); ++i) outcomes->push_back(out[i].data<int64_t>()[0]);
    return absl::OkStatus();
  }

  // The global step of every update's accumulator, read as replica r would.
  std::vector<int64_t> GlobalSteps(int r) {
    std::vector<std::string> fetches;
    for (const std::string& o : rg.replicas[r].push_outcomes) {
      fetches.push_back(o.substr(0, o.size() - 2) + "/local_step");
    }
    std::vector<Tensor> out;
    EXPECT_TRUE(session->Run({}, fetches, {}, &out).ok());
    std::vector<int64_t> steps;
    for (const Tensor& t : out) steps.push_back(t.data<int64_t>()[0]);
    return steps;
  }

  std::vector<Tensor> Variables(const TrainingGraph& tg) {
    std::vector<std::string> fetch;
    for (const std::string& v : tg.variables) fetch.push_back(rg.variable_node.at(v));
    std::vector<Tensor> out;
    EXPECT_TRUE(session->Run({}, fetch, {}, &out).ok());
    return out;
  }
};

class AccumulatorStrategyTest : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

// k = N: every global step applies the mean of all N replicas' gradients,
// which is single-process training at the global batch.
TEST_P(AccumulatorStrategyTest, AllOfNMatchesSingleProcessTrainingAtTheGlobalBatch) {
  const auto [n, optimizer] = GetParam();
  auto tg = LowerJob(MlpJob(optimizer));
  ASSERT_TRUE(tg.ok()) << tg.status();
  const Trained want = SingleProcess(*tg);
  Accumulating run(*tg, n, /*k=*/n);
  ASSERT_EQ(run.rg.replicas_to_aggregate, n);
  std::vector<std::vector<float>> losses(n);
  std::vector<std::vector<int64_t>> applied_by(n);  // per replica, per step: its pushes that applied
  std::vector<absl::Status> failed(n);
  std::vector<std::thread> replicas;
  for (int r = 0; r < n; ++r) {
    replicas.emplace_back([&, r] {
      std::vector<int64_t> outcomes;
      for (int step = 0; step < kSteps && failed[r].ok(); ++step) {
        failed[r] = run.Step(r, step, &outcomes, &losses[r]);
        int64_t applied = 0;
        for (int64_t o : outcomes) {
          EXPECT_GE(o, 0) << "replica " << r << " refused at step " << step;
          applied += o;
        }
        applied_by[r].push_back(applied);
      }
    });
  }
  for (auto& t : replicas) t.join();
  for (int r = 0; r < n; ++r) ASSERT_TRUE(failed[r].ok()) << "replica " << r << ": " << failed[r];
  const std::vector<Tensor> got = run.Variables(*tg);
  ASSERT_EQ(got.size(), want.variables.size());
  for (size_t i = 0; i < want.variables.size(); ++i) {
    EXPECT_LE(RelDiff(got[i], want.variables[i]), 1e-5) << tg->variables[i];
  }
  const size_t updates = run.rg.replicas[0].push_outcomes.size();
  for (int step = 0; step < kSteps; ++step) {
    // Each replica computed its loss on the weights of the global step.
    double mean = 0;
    int64_t applies = 0;
    for (int r = 0; r < n; ++r) {
      mean += losses[r][step] / n;
      applies += applied_by[r][step];
    }
    EXPECT_NEAR(mean, want.losses[step], 1e-5) << "step " << step;
    EXPECT_EQ(applies, static_cast<int64_t>(updates)) << "one apply per update per step " << step;
  }
  EXPECT_EQ(run.GlobalSteps(0), std::vector<int64_t>(updates, kSteps));
}

INSTANTIATE_TEST_SUITE_P(Replicas, AccumulatorStrategyTest,
                         ::testing::Combine(::testing::Values(2, 4),
                                            ::testing::Values("optimizer { sgd { learning_rate: 0.3 } }",
                                                              "optimizer { adam { learning_rate: 0.01 } }")),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param), "_of_", std::get<0>(info.param), "_",
                                               absl::StrContains(std::get<1>(info.param), "adam") ? "adam" : "sgd");
                         });

// k = 1 of 2 with replica 1 never pushing: replica 0's steps apply alone, as
// single-process training on its rows.
TEST(StrategyTest, OneOfTwoAdvancesWithoutTheOtherReplica) {
  auto tg = LowerJob(MlpJob("optimizer { sgd { learning_rate: 0.3 } }"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  const Trained want = SingleProcess(*tg, kBatch / 2);
  Accumulating run(*tg, 2, /*k=*/1);
  std::vector<int64_t> outcomes;
  for (int step = 0; step < kSteps; ++step) {
    ASSERT_TRUE(run.Step(0, step, &outcomes).ok());
    EXPECT_EQ(outcomes, std::vector<int64_t>(outcomes.size(), 1)) << "step " << step;
  }
  const std::vector<Tensor> got = run.Variables(*tg);
  for (size_t i = 0; i < want.variables.size(); ++i) {
    EXPECT_LE(RelDiff(got[i], want.variables[i]), 1e-5) << tg->variables[i];
  }
  EXPECT_EQ(run.GlobalSteps(1), std::vector<int64_t>(outcomes.size(), kSteps));
}

// k = 2 of 3: replicas 0 and 1 make every global step while replica 2 is
// held back by the test; its gradient, computed at the step it read before
// the others moved on, is then refused and changes nothing.
TEST(StrategyTest, TwoOfThreeAdvanceWhileAStragglerIsHeldAndItsStaleGradientIsRefused) {
  auto tg = LowerJob(MlpJob("optimizer { sgd { learning_rate: 0.3 } }"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  // Replicas 0 and 1 hold rows [0, 4) of each global batch (2 rows each).
  const Trained want = SingleProcess(*tg, 2 * (kBatch / 3));
  Accumulating run(*tg, 3, /*k=*/2);
  // The straggler reads its steps now (step 0 everywhere), before the others run.
  const std::vector<int64_t> straggler_steps = run.GlobalSteps(2);
  ASSERT_EQ(straggler_steps, std::vector<int64_t>(straggler_steps.size(), 0));

  absl::Status failed[2];
  std::thread replicas[2];
  for (int r = 0; r < 2; ++r) {
    replicas[r] = std::thread([&, r] {
      std::vector<int64_t> outcomes;
      for (int step = 0; step < kSteps && failed[r].ok(); ++step) failed[r] = run.Step(r, step, &outcomes);
    });
  }
  for (auto& t : replicas) t.join();
  for (const absl::Status& s : failed) ASSERT_TRUE(s.ok()) << s;
  const size_t updates = straggler_steps.size();
  EXPECT_EQ(run.GlobalSteps(0), std::vector<int64_t>(updates, kSteps));
  const std::vector<Tensor> before = run.Variables(*tg);
  for (size_t i = 0; i < want.variables.size(); ++i) {
    EXPECT_LE(RelDiff(before[i], want.variables[i]), 1e-5) << tg->variables[i];
  }

  // Released: the straggler pushes gradients of the step it read.
  std::vector<std::pair<std::string, Tensor>> stale;
  for (size_t u = 0; u < updates; ++u) {
    const std::string& o = run.rg.replicas[2].push_outcomes[u];
    Tensor t(DType::kInt64, TensorShape());
    t.data<int64_t>()[0] = straggler_steps[u];
    stale.emplace_back(o.substr(0, o.size() - 2) + "/local_step", t);
  }
  std::vector<int64_t> outcomes;
  ASSERT_TRUE(run.Step(2, 0, &outcomes, nullptr, stale).ok());
  EXPECT_EQ(outcomes, std::vector<int64_t>(updates, -1));
  const std::vector<Tensor> after = run.Variables(*tg);
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(RelDiff(after[i], before[i]), 0) << tg->variables[i];
  EXPECT_EQ(run.GlobalSteps(0), std::vector<int64_t>(updates, kSteps));
}

// k < N replicas running free, as the job runner runs them, keep making
// global steps: no replica waits forever for a step that cannot complete.
// Stopped as the runner stops them: no new steps, then abort what is parked.
TEST(StrategyTest, FreeRunningKOfNReplicasKeepMakingGlobalSteps) {
  auto tg = LowerJob(MlpJob("optimizer { adam { learning_rate: 0.01 } }"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  constexpr int64_t kGlobalSteps = 150;
  for (const auto& [n, k] : {std::pair<int, int>{3, 2}, std::pair<int, int>{4, 3}, std::pair<int, int>{4, 2}}) {
    SCOPED_TRACE(absl::StrCat(k, " of ", n));
    Accumulating run(*tg, n, k);
    absl::Mutex mu;
    bool stop = false;
    int running = n;
    std::vector<int64_t> applies(run.rg.replicas[0].push_outcomes.size(), 0);
    int64_t refused = 0;
    absl::Status failed;
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return stop || *std::min_element(applies.begin(), applies.end()) >= kGlobalSteps;
    };
    std::vector<std::thread> replicas;
    for (int r = 0; r < n; ++r) {
      replicas.emplace_back([&, r] {
        std::vector<int64_t> outcomes;
        for (int step = 0;; ++step) {
          {
            absl::MutexLock lock(&mu);
            if (done()) break;
          }
          absl::Status s = run.Step(r, step % kSteps, &outcomes);
          absl::MutexLock lock(&mu);
          if (!s.ok()) {
            if (!done()) failed = s;
            stop = true;
            break;
          }
          for (size_t u = 0; u < outcomes.size(); ++u) {
            applies[u] += outcomes[u] > 0 ? 1 : 0;
            refused += outcomes[u] < 0 ? 1 : 0;
          }
        }
        absl::MutexLock lock(&mu);
        --running;
      });
    }
    {
      absl::MutexLock lock(&mu);
      // A bound for a hang, not a timing: the steps take milliseconds.
      EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(120)))
          << "global steps stalled at " << *std::min_element(applies.begin(), applies.end());
      stop = true;
    }
    // Abort until every replica is out of its step; bounded like the wait above.
    const absl::Time give_up = absl::Now() + absl::Seconds(120);
    for (bool idle_now = false; !idle_now;) {
      run.session->AbortRunningSteps(absl::CancelledError("test over"));
      absl::MutexLock lock(&mu);
      auto idle = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return running == 0; };
      idle_now = mu.AwaitWithTimeout(absl::Condition(&idle), absl::Milliseconds(100));
      if (!idle_now && absl::Now() >= give_up) {
        ADD_FAILURE() << running << " replica(s) still in a step 120 s after the abort";
        break;
      }
    }
    for (auto& t : replicas) t.join();
    EXPECT_TRUE(failed.ok()) << failed;
    const std::vector<int64_t> steps = run.GlobalSteps(0);
    EXPECT_GE(*std::min_element(steps.begin(), steps.end()), kGlobalSteps);
    ::testing::Test::RecordProperty(absl::StrCat("refused_", k, "_of_", n), static_cast<int>(refused));
  }
}

TEST(StrategyTest, ReplicasToAggregateOutOfRangeOrWithoutSyncParameterServerIsInvalidArgument) {
  auto tg = LowerJob(MlpJob("optimizer { sgd { learning_rate: 0.3 } }"));
  ASSERT_TRUE(tg.ok());
  Layout layout = For(StrategySpec::PARAMETER_SERVER, 2);
  for (int k : {3, -1}) {
    layout.options.replicas_to_aggregate = k;
    auto s = ApplyStrategy(*tg, layout.options);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << k;
    EXPECT_TRUE(absl::StrContains(s.status().message(), absl::StrCat("replicas_to_aggregate ", k))) << s.status();
  }
  layout.options.replicas_to_aggregate = 1;
  layout.options.sync = false;
  auto s = ApplyStrategy(*tg, layout.options);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "sync")) << s.status();
  // k-of-N applies SGD and momentum in their plain forms: no update count.
  auto scheduled = LowerJob(MlpJob(kScheduled));
  ASSERT_TRUE(scheduled.ok()) << scheduled.status();
  layout.options.sync = true;
  s = ApplyStrategy(*scheduled, layout.options);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "does not support a learning-rate schedule")) << s.status();
  Layout mirrored = For(StrategySpec::MIRRORED, 2);
  mirrored.options.replicas_to_aggregate = 1;
  s = ApplyStrategy(*tg, mirrored.options);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "MIRRORED")) << s.status();
}

}  // namespace
}  // namespace master
}  // namespace weft
