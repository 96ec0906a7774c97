#include "graph/partition.h"

#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "google/protobuf/text_format.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/lowering.h"
#include "graph/ops/ops.h"
#include "graph/placer.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

constexpr char kA[] = "/job:worker/task:0/device:CPU:0";
constexpr char kB[] = "/job:ps/task:0/device:CPU:0";
constexpr char kC[] = "/job:ps/task:1/device:CPU:0";

std::vector<const NodeDef*> NodesOf(const GraphDef& def, const std::string& op) {
  std::vector<const NodeDef*> out;
  for (const NodeDef& n : def.node()) {
    if (n.op() == op) out.push_back(&n);
  }
  return out;
}

const NodeDef* Find(const GraphDef& def, const std::string& name) {
  for (const NodeDef& n : def.node()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

std::string S(const NodeDef& n, const char* attr) { return GetStringAttr(n, attr).value(); }

bool Inserted(const NodeDef& n) {
  return n.op() == "_Send" || n.op() == "_Recv" || absl::StartsWith(n.name(), "_ctrl/");
}

// Checks what every partitioning must satisfy: each partition parses, its
// nodes carry its device, original nodes appear once with nothing lost, and
// _Send and _Recv pair up one to one.
void CheckPartitions(const Graph& g, const std::map<std::string, GraphDef>& parts) {
  std::multiset<std::string> originals;
  std::multiset<std::tuple<std::string, std::string, std::string>> sends, recvs;
  for (const auto& [device, def] : parts) {
    auto pg = Graph::FromGraphDef(def);
    EXPECT_TRUE(pg.ok()) << device << ": " << pg.status();
    for (const NodeDef& n : def.node()) {
      EXPECT_EQ(n.device(), device) << n.name();
      if (!Inserted(n)) {
        originals.insert(n.name());
        EXPECT_EQ(g.FindNode(n.name())->assigned_device(), device) << n.name();
      }
      auto key = [&] { return std::make_tuple(S(n, "tensor_name"), S(n, "send_device"), S(n, "recv_device")); };
      if (n.op() == "_Send") {
        EXPECT_EQ(S(n, "send_device"), device);
        sends.insert(key());
      }
      if (n.op() == "_Recv") {
        EXPECT_EQ(S(n, "recv_device"), device);
        recvs.insert(key());
      }
    }
  }
  std::multiset<std::string> want;
  for (const auto& n : g.nodes()) want.insert(n->name());
  EXPECT_EQ(originals, want);
  EXPECT_EQ(sends, recvs);
  using Key = std::tuple<std::string, std::string, std::string>;
  EXPECT_EQ(std::set<Key>(sends.begin(), sends.end()).size(), sends.size())
      << "a (tensor, send, recv) key is used twice";
}

// a=Relu(x) on A feeds b1, b2 on B and n on A; c=Add(b1, b2) on B feeds d on A.
struct TwoDevices {
  Graph g;
  TwoDevices() {
    GraphBuilder b(&g);
    Output x = b.Placeholder(DType::kFloat32, {-1, 4}, "x");
    Output a = ops::Relu(&b, x, "a");
    Output b1 = ops::Tanh(&b, a, "b1");
    Output b2 = ops::Sigmoid(&b, a, "b2");
    ops::Neg(&b, a, "n");
    Output c = ops::Add(&b, b1, b2, "c");
    b.Op("Identity", {c}, {}, "d");
    EXPECT_TRUE(b.status().ok()) << b.status();
    for (const auto& node : g.nodes()) node->set_assigned_device(kA);
    for (const char* n : {"b1", "b2", "c"}) g.FindNode(n)->set_assigned_device(kB);
  }
};

TEST(PartitionTest, OnePairPerCrossingEndpointAndDevice) {
  TwoDevices t;
  auto parts = PartitionGraph(t.g);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 2u);
  const GraphDef& a = parts->at(kA);
  const GraphDef& b = parts->at(kB);
  CheckPartitions(t.g, *parts);

  // a -> {b1, b2}: one pair, shared by both consumers.
  ASSERT_EQ(NodesOf(a, "_Send").size(), 1u);
  ASSERT_EQ(NodesOf(b, "_Recv").size(), 1u);
  const NodeDef& send = *NodesOf(a, "_Send")[0];
  const NodeDef& recv = *NodesOf(b, "_Recv")[0];
  EXPECT_EQ(send.input(0), "a");
  EXPECT_EQ(S(send, "tensor_name"), "a:0");
  EXPECT_EQ(S(send, "recv_device"), kB);
  EXPECT_EQ(S(recv, "send_device"), kA);
  EXPECT_EQ(GetTypeAttr(recv, "tensor_type").value(), DType::kFloat32);
  EXPECT_EQ(GetShapeAttr(recv, "shape").value(), TensorShape({-1, 4}));
  EXPECT_EQ(Find(b, "b1")->input(0), recv.name());
  EXPECT_EQ(Find(b, "b2")->input(0), recv.name());
  EXPECT_EQ(Find(a, "n")->input(0), "a");  // same-device edge untouched
  // c -> d goes back the other way.
  ASSERT_EQ(NodesOf(b, "_Send").size(), 1u);
  ASSERT_EQ(NodesOf(a, "_Recv").size(), 1u);
  EXPECT_EQ(Find(a, "d")->input(0), NodesOf(a, "_Recv")[0]->name());
  EXPECT_EQ(send.name(), "_send/a_0/to/job_ps_task_0_device_CPU_0");
}

TEST(PartitionTest, OneEndpointToTwoDevicesGetsTwoPairs) {
  TwoDevices t;
  t.g.FindNode("b2")->set_assigned_device(kC);
  t.g.FindNode("c")->set_assigned_device(kC);
  auto parts = PartitionGraph(t.g);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 3u);
  CheckPartitions(t.g, *parts);
  std::set<std::string> to;
  for (const NodeDef* s : NodesOf(parts->at(kA), "_Send")) {
    if (s->input(0) == "a") to.insert(S(*s, "recv_device"));
  }
  EXPECT_EQ(to, (std::set<std::string>{kB, kC}));
}

TEST(PartitionTest, ControlEdgesAcrossDevices) {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {-1, 4}, "x");
  Output y = ops::Relu(&b, x, "y");
  b.AddNode("NoOp", {}, {}, "after1", {y.node});
  b.AddNode("NoOp", {}, {}, "after2", {y.node});
  ASSERT_TRUE(b.status().ok()) << b.status();
  for (const auto& n : g.nodes()) n->set_assigned_device(kA);
  g.FindNode("after1")->set_assigned_device(kB);
  g.FindNode("after2")->set_assigned_device(kB);

  auto parts = PartitionGraph(g);
  ASSERT_TRUE(parts.ok()) << parts.status();
  CheckPartitions(g, *parts);
  const GraphDef& a = parts->at(kA);
  const GraphDef& pb = parts->at(kB);
  ASSERT_EQ(NodesOf(a, "_Send").size(), 1u);
  ASSERT_EQ(NodesOf(pb, "_Recv").size(), 1u);
  const NodeDef& send = *NodesOf(a, "_Send")[0];
  const NodeDef& recv = *NodesOf(pb, "_Recv")[0];
  EXPECT_EQ(S(send, "tensor_name"), "^y");
  // The sent value is a dummy computed after y.
  const NodeDef* dummy = Find(a, send.input(0));
  ASSERT_NE(dummy, nullptr);
  EXPECT_EQ(dummy->op(), "Const");
  ASSERT_EQ(dummy->input_size(), 1);
  EXPECT_EQ(dummy->input(0), "^y");
  EXPECT_EQ(GetShapeAttr(recv, "shape").value(), TensorShape({}));
  for (const char* n : {"after1", "after2"}) {
    ASSERT_EQ(Find(pb, n)->input_size(), 1);
    EXPECT_EQ(Find(pb, n)->input(0), "^" + recv.name());
  }
}

TEST(PartitionTest, UnplacedNodeIsAnError) {
  TwoDevices t;
  t.g.FindNode("n")->set_assigned_device("");
  auto parts = PartitionGraph(t.g);
  ASSERT_FALSE(parts.ok());
  EXPECT_EQ(parts.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(parts.status().message(), "'n'")) << parts.status();
}

TEST(PartitionTest, RendezvousKey) {
  EXPECT_EQ(RendezvousKey(kA, 0, kB, "a:0", 7),
            std::string(kA) + ";0000000000000000;" + kB + ";a:0;7");
  EXPECT_EQ(RendezvousKey(kA, 255, kB, "^y", 12), std::string(kA) + ";00000000000000ff;" + kB + ";^y;12");
}

TEST(PartitionTest, RecvNeedsItsAttributes) {
  GraphDef def;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "node { name: 'r' op: '_Recv' attr { key: 'tensor_name' value { s: 'a:0' } } }", &def));
  auto g = Graph::FromGraphDef(def);
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(absl::StrContains(g.status().message(), "'r'")) << g.status();
}

TEST(PartitionTest, LoweredMlpWithVariablesOnPsSplitsInTwo) {
  JobSpec job;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"(model { input_shape: [8] num_classes: 3
      layer { dense { units: 4 activation: RELU } }
      layer { dropout { rate: 0.5 } }
      layer { dense { units: 3 } } }
      optimizer { momentum { learning_rate: 0.1 momentum: 0.9 } })",
                                                            &job));
  auto tg = LowerJob(job);
  ASSERT_TRUE(tg.ok()) << tg.status();
  for (const auto& n : tg->graph->nodes()) {
    if (n->op() == "Variable") n->set_requested_device("/job:ps/task:0");
  }
  ASSERT_TRUE(PlaceGraph(tg->graph.get(), {kA, kB}, kA).ok());
  auto parts = PartitionGraph(*tg->graph);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 2u);
  CheckPartitions(*tg->graph, *parts);
  const GraphDef& worker = parts->at(kA);
  const GraphDef& ps = parts->at(kB);
  EXPECT_TRUE(NodesOf(worker, "Variable").empty());
  EXPECT_EQ(NodesOf(ps, "Variable").size(), 8u);
  EXPECT_EQ(NodesOf(ps, "ApplyMomentum").size(), 4u);
  // Each variable crosses once to the worker, however many readers it has
  // there (training and evaluation passes), and each gradient crosses to ps.
  int var_reads = 0;
  for (const NodeDef* r : NodesOf(worker, "_Recv")) {
    const std::string src = S(*r, "tensor_name");
    if (absl::StrContains(src, "kernel:0") || absl::StrContains(src, "bias:0")) ++var_reads;
  }
  EXPECT_EQ(var_reads, 4);
  int grads = 0;
  for (const NodeDef* a : NodesOf(ps, "ApplyMomentum")) {
    ASSERT_EQ(Find(ps, a->input(2))->op(), "_Recv") << a->name() << " reads its gradient from " << a->input(2);
    ++grads;
  }
  EXPECT_EQ(grads, 4);
  // The train op on the worker waits for the updates on ps through control recvs.
  const NodeDef* train = Find(worker, tg->train_op);
  ASSERT_NE(train, nullptr);
  for (const std::string& in : train->input()) {
    ASSERT_EQ(Find(worker, in.substr(1))->op(), "_Recv") << in;
  }
}

}  // namespace
}  // namespace weft
