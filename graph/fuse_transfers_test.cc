#include "graph/fuse_transfers.h"

#include <tuple>

#include "absl/strings/match.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/ops/ops.h"
#include "graph/partition.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

constexpr char kWorker[] = "/job:worker/task:0/device:CPU:0";
constexpr char kWorkerCpu1[] = "/job:worker/task:0/device:CPU:1";
constexpr char kPs[] = "/job:ps/task:0/device:CPU:0";

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

Tensor Filled(const TensorShape& shape) {
  Tensor t(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.data<float>()[i] = 0.5f * static_cast<float>(i);
  return t;
}

// A parameter-server step in miniature: w1 [4,3] and w2 [3,2] live on the
// ps; the worker reads both, computes g1, g2 of the same shapes and an
// activation h of unknown batch size; the ps consumes g1, g2 and h.
struct PsStep {
  Graph g;
  PsStep() {
    GraphBuilder b(&g);
    Output w1 = b.Const(Filled({4, 3}), "w1");
    Output w2 = b.Const(Filled({3, 2}), "w2");
    Output x = b.Placeholder(DType::kFloat32, {-1, 4}, "x");
    Output h = b.Op("MatMul", {x, w1}, {}, "h");
    ops::Tanh(&b, w1, "g1");
    ops::Tanh(&b, w2, "g2");
    ops::Add(&b, w1, Output(g.FindNode("g1")), "u1");
    ops::Add(&b, w2, Output(g.FindNode("g2")), "u2");
    ops::Relu(&b, h, "r");
    EXPECT_TRUE(b.status().ok()) << b.status();
    for (const auto& n : g.nodes()) n->set_assigned_device(kWorker);
    for (const char* n : {"w1", "w2", "u1", "u2", "r"}) g.FindNode(n)->set_assigned_device(kPs);
  }
};

TEST(FuseTransfersTest, PacksEachDirectionIntoOneMessage) {
  PsStep t;
  auto parts = PartitionGraph(t.g);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(NodesOf(parts->at(kPs), "_Send").size(), 2u);     // w1, w2
  ASSERT_EQ(NodesOf(parts->at(kWorker), "_Send").size(), 3u);  // g1, g2, h
  auto stats = FuseCrossTaskTransfers(t.g, &*parts);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->groups, 2);
  EXPECT_EQ(stats->sends_fused, 4);

  const GraphDef& ps = parts->at(kPs);
  const GraphDef& worker = parts->at(kWorker);
  for (const auto& [device, def] : *parts) {
    auto g = Graph::FromGraphDef(def);
    EXPECT_TRUE(g.ok()) << device << ": " << g.status();
  }
  // ps -> worker: one send of w1 and w2 packed.
  ASSERT_EQ(NodesOf(ps, "_Send").size(), 1u);
  ASSERT_EQ(NodesOf(ps, "PackTensors").size(), 1u);
  const NodeDef& pack = *NodesOf(ps, "PackTensors")[0];
  ASSERT_EQ(pack.input_size(), 2);
  EXPECT_EQ(pack.input(0), "w1");
  EXPECT_EQ(pack.input(1), "w2");
  ASSERT_EQ(NodesOf(worker, "_Recv").size(), 1u);
  const NodeDef& recv = *NodesOf(worker, "_Recv")[0];
  // The second part starts at the next 64-byte boundary (16 floats).
  EXPECT_EQ(GetShapeAttr(recv, "shape").value(), TensorShape({16 + 3 * 2}));
  EXPECT_EQ(GetStringAttr(recv, "tensor_name").value(),
            GetStringAttr(*NodesOf(ps, "_Send")[0], "tensor_name").value());
  ASSERT_EQ(NodesOf(worker, "UnpackTensors").size(), 1u);
  const std::string unpack = NodesOf(worker, "UnpackTensors")[0]->name();
  EXPECT_EQ(Find(worker, "g1")->input(0), unpack + ":0");
  EXPECT_EQ(Find(worker, "g2")->input(0), unpack + ":1");

  // worker -> ps: g1 and g2 packed; h, of unknown batch size, keeps its own pair.
  ASSERT_EQ(NodesOf(worker, "_Send").size(), 2u);
  ASSERT_EQ(NodesOf(ps, "UnpackTensors").size(), 1u);
  const std::string ps_unpack = NodesOf(ps, "UnpackTensors")[0]->name();
  EXPECT_EQ(Find(ps, "u1")->input(1), ps_unpack + ":0");
  EXPECT_EQ(Find(ps, "u2")->input(1), ps_unpack + ":1");
  EXPECT_TRUE(absl::StartsWith(Find(ps, "r")->input(0), "_recv/h_0")) << Find(ps, "r")->input(0);
}

// The ps sends the same variables to two workers: one message to each.
TEST(FuseTransfersTest, FansOutToEachTaskSeparately) {
  constexpr char kWorker1[] = "/job:worker/task:1/device:CPU:0";
  Graph g;
  GraphBuilder b(&g);
  Output w1 = b.Const(Filled({2, 3}), "w1");
  Output w2 = b.Const(Filled({5}), "w2");
  ops::Tanh(&b, w1, "a1");
  ops::Tanh(&b, w2, "a2");
  ops::Neg(&b, w1, "b1");
  ops::Neg(&b, w2, "b2");
  ASSERT_TRUE(b.status().ok()) << b.status();
  for (const char* n : {"w1", "w2"}) g.FindNode(n)->set_assigned_device(kPs);
  for (const char* n : {"a1", "a2"}) g.FindNode(n)->set_assigned_device(kWorker);
  for (const char* n : {"b1", "b2"}) g.FindNode(n)->set_assigned_device(kWorker1);
  auto parts = PartitionGraph(g);
  ASSERT_TRUE(parts.ok()) << parts.status();
  auto stats = FuseCrossTaskTransfers(g, &*parts);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->groups, 2);
  EXPECT_EQ(NodesOf(parts->at(kPs), "_Send").size(), 2u);
  for (const auto& [device, def] : *parts) {
    auto pg = Graph::FromGraphDef(def);
    EXPECT_TRUE(pg.ok()) << device << ": " << pg.status();
    for (const NodeDef& n : def.node()) EXPECT_EQ(n.device(), device) << n.name();
  }
  for (const auto& [device, first, second] : {std::make_tuple(kWorker, "a1", "a2"),
                                              std::make_tuple(kWorker1, "b1", "b2")}) {
    const GraphDef& def = parts->at(device);
    ASSERT_EQ(NodesOf(def, "UnpackTensors").size(), 1u) << device;
    const std::string unpack = NodesOf(def, "UnpackTensors")[0]->name();
    EXPECT_EQ(Find(def, first)->input(0), unpack + ":0");
    EXPECT_EQ(Find(def, second)->input(0), unpack + ":1");
  }
}

// x goes worker -> ps, comes back as y, and z = f(y) goes worker -> ps again.
// Packing x with z would make x wait for z, which waits for x: the two are at
// different cross-task depths and must stay apart.
TEST(FuseTransfersTest, NeverPacksAcrossARoundTrip) {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Const(Filled({3}), "x");
  Output y = ops::Neg(&b, x, "y");
  Output z = ops::Tanh(&b, y, "z");
  ops::Add(&b, x, z, "sum");
  ASSERT_TRUE(b.status().ok()) << b.status();
  for (const auto& n : g.nodes()) n->set_assigned_device(kWorker);
  for (const char* n : {"y", "sum"}) g.FindNode(n)->set_assigned_device(kPs);
  auto parts = PartitionGraph(g);
  ASSERT_TRUE(parts.ok()) << parts.status();
  auto stats = FuseCrossTaskTransfers(g, &*parts);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->groups, 0);
  EXPECT_EQ(NodesOf(parts->at(kWorker), "_Send").size(), 2u);
  EXPECT_TRUE(NodesOf(parts->at(kWorker), "PackTensors").empty());
}

TEST(FuseTransfersTest, LeavesDevicesOfOneTaskAlone) {
  PsStep t;
  for (const char* n : {"w1", "w2", "u1", "u2", "r"}) t.g.FindNode(n)->set_assigned_device(kWorkerCpu1);
  auto parts = PartitionGraph(t.g);
  ASSERT_TRUE(parts.ok()) << parts.status();
  auto stats = FuseCrossTaskTransfers(t.g, &*parts);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->groups, 0);
  EXPECT_EQ(NodesOf(parts->at(kWorkerCpu1), "_Send").size(), 2u);
}

}  // namespace
}  // namespace weft
