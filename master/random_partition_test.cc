// Random graphs placed over three tasks give the same results (within 1e-6)
// as the single-process run: MasterSession's prune / place / partition /
// _Send-_Recv path checked against RunGraphOnce on graphs nobody hand-wrote.
#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/builder.h"
#include "gtest/gtest.h"
#include "master/in_process_cluster.h"
#include "master/master_session.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace master {
namespace {

using ::weft::testing::RandomTensor;

constexpr char kPs[] = "/job:ps/task:0";
constexpr char kW0[] = "/job:worker/task:0";
constexpr char kW1[] = "/job:worker/task:1";
constexpr int kNumSeeds = 30;

// One generated graph, with what the test needs to know about it.
struct RandomGraph {
  GraphDef def;
  std::vector<std::string> fetches;
  // The tasks MasterSession must register a partition on: those of the
  // fetches' ancestors, plus those of both (always fed) placeholders.
  std::set<std::string> tasks;
  std::string description;  // one line per node, for failure messages
};

// 2 placeholders, 1-2 variables, 8-20 ops over [4,4] floats, each node on a
// random task; 2-3 fetches including the last node.
RandomGraph MakeRandomGraph(uint32_t seed) {
  static const char* const kTasks[] = {kW0, kW1, kPs};
  static const char* const kOps[] = {"Add", "Sub", "Mul", "MatMul", "Relu", "Tanh", "Sigmoid", "Identity"};
  std::mt19937 rng(seed);
  auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

  Graph g;
  GraphBuilder b(&g);
  std::vector<Output> nodes;
  std::vector<std::string> device;       // per entry of `nodes`
  std::vector<std::vector<int>> inputs;  // per entry of `nodes`
  RandomGraph r;
  auto add = [&](Output o, const std::string& dev, std::vector<int> in, const std::string& what) {
    nodes.push_back(o);
    device.push_back(dev);
    inputs.push_back(std::move(in));
    absl::StrAppend(&r.description, o.valid() ? o.node->name() : "?", " = ", what, " @", dev, "\n");
  };

  for (const char* name : {"x0", "x1"}) {
    const std::string dev = kTasks[uniform(0, 2)];
    b.set_device(dev);
    add(b.Placeholder(DType::kFloat32, {4, 4}, name), dev, {}, "Placeholder");
  }
  const int num_vars = uniform(1, 2);
  for (int i = 0; i < num_vars; ++i) {
    const std::string dev = kTasks[uniform(0, 2)];
    b.set_device(dev);
    const int64_t var_seed = uniform(1, 1000);
    add(b.Variable(absl::StrCat("v", i), DType::kFloat32, {4, 4}, "glorot_uniform", var_seed), dev, {},
        absl::StrCat("Variable(seed ", var_seed, ")"));
  }
  const int num_ops = uniform(8, 20);
  for (int i = 0; i < num_ops; ++i) {
    const std::string dev = kTasks[uniform(0, 2)];
    const std::string op = kOps[uniform(0, 7)];
    const bool binary = op == "Add" || op == "Sub" || op == "Mul" || op == "MatMul";
    std::vector<int> in;
    std::vector<Output> in_outputs;
    for (int k = 0; k < (binary ? 2 : 1); ++k) {
      in.push_back(uniform(0, static_cast<int>(nodes.size()) - 1));
      in_outputs.push_back(nodes[in.back()]);
    }
    std::string what = op + "(";
    for (size_t k = 0; k < in.size(); ++k) {
      absl::StrAppend(&what, k == 0 ? "" : ", ", nodes[in[k]].valid() ? nodes[in[k]].node->name() : "?");
    }
    what += ")";
    b.set_device(dev);
    add(b.Op(op, in_outputs, {}, absl::StrCat("n", i)), dev, std::move(in), what);
  }
  EXPECT_TRUE(b.status().ok()) << b.status();

  const int last = static_cast<int>(nodes.size()) - 1;
  std::vector<int> fetched = {last};
  const int num_fetches = uniform(2, 3);
  while (static_cast<int>(fetched.size()) < num_fetches) {
    const int f = uniform(0, last - 1);
    if (std::find(fetched.begin(), fetched.end(), f) == fetched.end()) fetched.push_back(f);
  }
  std::vector<bool> needed(nodes.size(), false);
  std::vector<int> stack = fetched;
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (needed[n]) continue;
    needed[n] = true;
    for (int k : inputs[n]) stack.push_back(k);
  }
  needed[0] = needed[1] = true;  // fed placeholders always get a partition
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (needed[i]) r.tasks.insert(device[i]);
  }
  for (int f : fetched) r.fetches.push_back(nodes[f].node->name());
  r.def = g.ToGraphDef();
  return r;
}

// |got - want| <= 1e-6 * max(1, |want|) elementwise.
void ExpectClose(const Tensor& got, const Tensor& want, const std::string& where) {
  ASSERT_EQ(got.shape(), want.shape()) << where;
  ASSERT_EQ(got.dtype(), want.dtype()) << where;
  auto g = got.flat<float>();
  auto w = want.flat<float>();
  for (size_t i = 0; i < w.size(); ++i) {
    const double tol = 1e-6 * std::max(1.0, std::fabs(static_cast<double>(w[i])));
    EXPECT_LE(std::fabs(static_cast<double>(g[i]) - w[i]), tol) << where << " element " << i << ": got " << g[i]
                                                                 << ", want " << w[i];
  }
}

TEST(RandomPartitionTest, ThreeTasksMatchOneProcess) {
  int seeds_on_three_tasks = 0;
  for (uint32_t seed = 1; seed <= kNumSeeds; ++seed) {
    const RandomGraph rg = MakeRandomGraph(seed);
    const std::string ctx = absl::StrCat("seed ", seed, ", fetches ", rg.fetches.front(), "..., graph:\n",
                                         rg.description);
    SCOPED_TRACE(ctx);
    const std::vector<std::pair<std::string, Tensor>> feeds = {
        {"x0", RandomTensor({4, 4}, 1000 + seed, -0.5f, 0.5f)},
        {"x1", RandomTensor({4, 4}, 2000 + seed, -0.5f, 0.5f)}};

    auto local_graph = Graph::FromGraphDef(rg.def);
    ASSERT_TRUE(local_graph.ok()) << local_graph.status();
    CpuDevice local("/job:localhost/task:0/device:CPU:0", 1);
    auto want = RunGraphOnce(**local_graph, &local, feeds, rg.fetches);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_EQ(want->size(), rg.fetches.size());

    auto cluster = InProcessCluster::Create({kW0, kW1, kPs});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    auto session = MasterSession::Create(absl::StrCat("s", seed), rg.def, (*cluster)->workers());
    ASSERT_TRUE(session.ok()) << session.status();
    for (int step = 0; step < 2; ++step) {
      std::vector<Tensor> got;
      absl::Status st = (*session)->Run(feeds, rg.fetches, {}, &got);
      ASSERT_TRUE(st.ok()) << "step " << step << ": " << st;
      ASSERT_EQ(got.size(), rg.fetches.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ExpectClose(got[i], (*want)[i], absl::StrCat("step ", step, " fetch ", rg.fetches[i]));
      }
    }
    // The second step reused the registered partitions: one per task used.
    EXPECT_EQ((*session)->num_signatures(), 1);
    std::set<std::string> with_graphs;
    for (const char* t : {kW0, kW1, kPs}) {
      if ((*cluster)->worker(t)->NumGraphs() > 0) with_graphs.insert(t);
    }
    EXPECT_EQ(with_graphs, rg.tasks);
    if (rg.tasks.size() == 3) ++seeds_on_three_tasks;
    ASSERT_TRUE((*session)->Close().ok());
    session->reset();
  }
  RecordProperty("seeds_on_three_tasks", seeds_on_three_tasks);
  // The generator must exercise real three-way partitions, not just one task.
  EXPECT_GE(seeds_on_three_tasks, kNumSeeds / 2);
}

}  // namespace
}  // namespace master
}  // namespace weft
