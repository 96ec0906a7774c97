// MasterSession over real in-process tasks (worker::Worker via LocalWorker):
// partitioned steps must compute what one process computes.
#include <cmath>

#include "absl/strings/match.h"
#include "google/protobuf/text_format.h"
#include "graph/builder.h"
#include "graph/lowering.h"
#include "gtest/gtest.h"
#include "master/in_process_cluster.h"
#include "master/master_session.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace master {
namespace {

using ::weft::testing::MaxAbsDiff;
using ::weft::testing::RandomTensor;

constexpr char kPs[] = "/job:ps/task:0";
constexpr char kW0[] = "/job:worker/task:0";
constexpr char kW1[] = "/job:worker/task:1";

std::unique_ptr<InProcessCluster> ThreeTasks() {
  auto c = InProcessCluster::Create({kPs, kW0, kW1});
  EXPECT_TRUE(c.ok()) << c.status();
  return *std::move(c);
}

// x (worker 0) times w (ps), relu on worker 1.
GraphDef MatMulGraph() {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {-1, 3}, "x");
  b.set_device(kPs);
  Output w = b.Variable("w", DType::kFloat32, {3, 4}, "glorot_uniform", 5);
  b.set_device("");
  Output y = b.Op("MatMul", {x, w}, {}, "y");
  b.set_device(kW1);
  b.Op("Relu", {y}, {}, "out");
  EXPECT_TRUE(b.status().ok()) << b.status();
  return g.ToGraphDef();
}

TEST(MasterSessionClusterTest, PartitionedGraphMatchesOneProcess) {
  auto cluster = ThreeTasks();
  auto s = MasterSession::Create("s", MatMulGraph(), cluster->workers());
  ASSERT_TRUE(s.ok()) << s.status();
  const Tensor x = RandomTensor({5, 3}, 11);
  std::vector<Tensor> got;
  ASSERT_TRUE((*s)->Run({{"x", x}}, {"out", "y", "w"}, {}, &got).ok());

  auto g = *Graph::FromGraphDef(MatMulGraph());
  CpuDevice local("/job:localhost/task:0/device:CPU:0", 1);
  auto want = RunGraphOnce(*g, &local, {{"x", x}}, {"out", "y", "w"});
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(got.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].shape(), (*want)[i].shape()) << i;
    EXPECT_LE(MaxAbsDiff(got[i], (*want)[i]), 1e-6) << i;
  }
  // The variable lives on the ps task only.
  EXPECT_EQ(cluster->worker(kPs)->VariableNames(), std::vector<std::string>{"w"});
  EXPECT_TRUE(cluster->worker(kW0)->VariableNames().empty());
}

TEST(MasterSessionClusterTest, TrainingWithVariablesOnPsMatchesOneProcess) {
  JobSpec job;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"(
      model { input_shape: [6] num_classes: 3
              layer { dense { units: 8 activation: RELU } }
              layer { dense { units: 3 } } }
      optimizer { momentum { learning_rate: 0.1 momentum: 0.9 } } seed: 3)",
                                                            &job));
  auto tg = LowerJob(job);
  ASSERT_TRUE(tg.ok()) << tg.status();
  for (const auto& n : tg->graph->nodes()) {
    if (n->op() == "Variable") n->set_requested_device(kPs);
  }
  const GraphDef def = tg->graph->ToGraphDef();

  auto cluster = ThreeTasks();
  auto s = *MasterSession::Create("s", def, cluster->workers());
  auto local_graph = *Graph::FromGraphDef(def);
  CpuDevice local("/job:localhost/task:0/device:CPU:0", 1);

  for (int step = 0; step < 5; ++step) {
    const Tensor features = RandomTensor({4, 6}, 100 + step);
    Tensor labels(DType::kInt32, {4});
    for (int i = 0; i < 4; ++i) labels.data<int32_t>()[i] = (step + i) % 3;
    const std::vector<std::pair<std::string, Tensor>> feeds = {{tg->features, features}, {tg->labels, labels}};
    std::vector<Tensor> got;
    ASSERT_TRUE(s->Run(feeds, {tg->loss}, {tg->train_op}, &got).ok()) << step;
    auto want = RunGraphOnce(*local_graph, &local, feeds, {tg->loss}, {tg->train_op});
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_NEAR(got[0].data<float>()[0], (*want)[0].data<float>()[0], 1e-6) << "step " << step;
  }
  // The trained variables agree, read back through a step of their own.
  std::vector<Tensor> got;
  ASSERT_TRUE(s->Run({}, tg->variables, {}, &got).ok());
  auto want = RunGraphOnce(*local_graph, &local, {}, tg->variables);
  ASSERT_TRUE(want.ok()) << want.status();
  for (size_t i = 0; i < tg->variables.size(); ++i) {
    EXPECT_LE(MaxAbsDiff(got[i], (*want)[i]), 1e-6) << tg->variables[i];
  }
  // Variables and their updates ran on ps; workers hold none.
  const std::vector<std::string> on_ps = cluster->worker(kPs)->VariableNames();
  for (const std::string& v : tg->variables) {
    EXPECT_NE(std::find(on_ps.begin(), on_ps.end(), v), on_ps.end()) << v;
  }
  EXPECT_GT(on_ps.size(), tg->variables.size());  // the momentum slots too
  EXPECT_TRUE(cluster->worker(kW0)->VariableNames().empty());
  EXPECT_EQ(s->num_signatures(), 2);
}

TEST(MasterSessionClusterTest, KernelErrorOnOneTaskNamesItAndDoesNotHang) {
  // x is fed on worker 1; a bad shape fails MatMul there while worker 0
  // waits in a _Recv for y and ps has sent w.
  Graph g;
  GraphBuilder b(&g);
  b.set_device(kW1);
  Output x = b.Placeholder(DType::kFloat32, {-1, -1}, "x");
  b.set_device(kPs);
  Output w = b.Variable("w", DType::kFloat32, {3, 4}, "ones");
  b.set_device(kW1);
  Output y = b.Op("MatMul", {x, w}, {}, "y");
  b.set_device(kW0);
  b.Op("Relu", {y}, {}, "out");
  ASSERT_TRUE(b.status().ok()) << b.status();

  auto cluster = ThreeTasks();
  auto s = *MasterSession::Create("s", g.ToGraphDef(), cluster->workers());
  std::vector<Tensor> out;
  absl::Status st = s->Run({{"x", RandomTensor({2, 5}, 1)}}, {"out"}, {}, &out);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(absl::StartsWith(st.message(), "task /job:worker/task:1: ")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "'y' (MatMul)")) << st;

  // The session is still usable, and every step was cleaned up.
  ASSERT_TRUE(s->Run({{"x", RandomTensor({2, 3}, 1)}}, {"out"}, {}, &out).ok());
  EXPECT_EQ(out[0].shape(), TensorShape({2, 4}));
  ASSERT_TRUE(s->Close().ok());
  for (const char* t : {kPs, kW0, kW1}) EXPECT_EQ(cluster->worker(t)->NumGraphs(), 0) << t;
}

}  // namespace
}  // namespace master
}  // namespace weft
