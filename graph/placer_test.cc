#include "graph/placer.h"

#include "absl/strings/match.h"
#include "google/protobuf/text_format.h"
#include "graph/builder.h"
#include "graph/lowering.h"
#include "graph/ops/ops.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

constexpr char kW0[] = "/job:worker/task:0/device:CPU:0";
constexpr char kW1[] = "/job:worker/task:1/device:CPU:0";
constexpr char kPs0[] = "/job:ps/task:0/device:CPU:0";
constexpr char kPs1[] = "/job:ps/task:1/device:CPU:0";

const std::vector<std::string> kDevices = {kW0, kW1, kPs0, kPs1};

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// x -> MatMul(x, w) -> loss; w updated by ApplyGradientDescent.
struct SmallGraph {
  Graph g;
  Node* x = nullptr;
  Node* w = nullptr;
  Node* mm = nullptr;
  Node* apply = nullptr;
  SmallGraph(const std::string& w_device, const std::string& apply_device) {
    GraphBuilder b(&g);
    x = b.Placeholder(DType::kFloat32, {-1, 4}, "x").node;
    b.set_device(w_device);
    w = b.Variable("w", DType::kFloat32, {4, 2}, "zeros").node;
    b.set_device("");
    mm = ops::MatMul(&b, Output(x), Output(w), false, false, "mm").node;
    Output grad = b.Placeholder(DType::kFloat32, {4, 2}, "grad");
    b.set_device(apply_device);
    apply = ops::ApplyGradientDescent(&b, Output(w), grad, 0.1f, "apply").node;
    EXPECT_TRUE(b.status().ok()) << b.status();
  }
};

TEST(PlacerTest, ExplicitPartialAndDefaultPlacement) {
  SmallGraph s("/job:ps", "");
  s.x->set_requested_device("/job:worker/task:1/cpu:0");  // shorthand, canonicalised
  ASSERT_TRUE(PlaceGraph(&s.g, kDevices, kW0).ok());
  EXPECT_EQ(s.x->assigned_device(), kW1);
  EXPECT_EQ(s.w->assigned_device(), kPs0);  // "/job:ps" picks the first ps task
  EXPECT_EQ(s.apply->assigned_device(), kPs0);
  EXPECT_EQ(s.mm->assigned_device(), kW0);  // unconstrained: the default
  EXPECT_EQ(s.g.FindNode("grad")->assigned_device(), kW0);  // a gradient input is not colocated
}

TEST(PlacerTest, UpdateOpFollowsItsVariable) {
  SmallGraph s("/job:ps/task:1", "");
  ASSERT_TRUE(PlaceGraph(&s.g, kDevices, kW0).ok());
  EXPECT_EQ(s.w->assigned_device(), kPs1);
  EXPECT_EQ(s.apply->assigned_device(), kPs1);
  // A request on the update op alone pulls its unconstrained variable along.
  SmallGraph t("", "/job:ps/task:1");
  ASSERT_TRUE(PlaceGraph(&t.g, kDevices, kW0).ok());
  EXPECT_EQ(t.w->assigned_device(), kPs1);
}

TEST(PlacerTest, UpdateRequestedElsewhereIsAnErrorNamingBoth) {
  SmallGraph s("/job:ps/task:0", "/job:worker/task:0");
  absl::Status st = PlaceGraph(&s.g, kDevices, kW0);
  ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  for (const char* part : {"'apply'", "'w'", "/job:ps/task:0", "/job:worker/task:0"}) {
    EXPECT_TRUE(absl::StrContains(Msg(st), part)) << part << " not in: " << st;
  }
  EXPECT_TRUE(s.mm->assigned_device().empty());  // nothing assigned on error
}

TEST(PlacerTest, UnknownDeviceListsTheAvailableOnes) {
  SmallGraph s("/job:chief", "");
  absl::Status st = PlaceGraph(&s.g, kDevices, kW0);
  ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(absl::StrContains(Msg(st), "'w'")) << st;
  EXPECT_TRUE(absl::StrContains(Msg(st), "/job:chief")) << st;
  for (const std::string& d : kDevices) EXPECT_TRUE(absl::StrContains(Msg(st), d)) << d << " not in: " << st;

  SmallGraph t("/job:worker/task:7", "");
  EXPECT_FALSE(PlaceGraph(&t.g, kDevices, kW0).ok());
  SmallGraph u("/job:ps/device:GPU:0", "");
  EXPECT_FALSE(PlaceGraph(&u.g, kDevices, kW0).ok());
}

TEST(PlacerTest, BadArgumentsAreErrors) {
  SmallGraph s("", "");
  absl::Status st = PlaceGraph(&s.g, kDevices, "/job:worker/task:9/device:CPU:0");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(Msg(st), "default device")) << st;
  EXPECT_FALSE(PlaceGraph(&s.g, {"/job:worker"}, kW0).ok());  // not a full name
  EXPECT_FALSE(PlaceGraph(&s.g, {}, kW0).ok());
  s.mm->set_requested_device("worker:0");
  st = PlaceGraph(&s.g, kDevices, kW0);
  EXPECT_TRUE(absl::StrContains(Msg(st), "'mm'")) << st;
  EXPECT_TRUE(absl::StrContains(Msg(st), "'worker:0'")) << st;
}

JobSpec Job(const std::string& text) {
  JobSpec job;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &job)) << text;
  return job;
}

// Every trainable variable requested on ps; slots, update ops and the rest
// unconstrained.
void PlaceTrainingGraph(const TrainingGraph& tg, const std::vector<std::string>& var_devices) {
  for (size_t i = 0; i < tg.variables.size(); ++i) {
    tg.graph->FindNode(tg.variables[i])->set_requested_device(var_devices[i % var_devices.size()]);
  }
  absl::Status s = PlaceGraph(tg.graph.get(), kDevices, kW0);
  ASSERT_TRUE(s.ok()) << s;
}

TEST(PlacerTest, LoweredTrainingGraphPutsUpdatesOnPsAndForwardOnWorker) {
  auto tg = LowerJob(Job(R"(model { input_shape: [8] num_classes: 3
      layer { dense { units: 4 activation: RELU } }
      layer { dense { units: 3 } } }
      optimizer { momentum { learning_rate: 0.1 momentum: 0.9 } })"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  PlaceTrainingGraph(*tg, {"/job:ps/task:0"});
  int applies = 0, variables = 0;
  for (const auto& n : tg->graph->nodes()) {
    if (absl::StartsWith(n->op(), "Apply")) {
      ++applies;
      EXPECT_EQ(n->assigned_device(), kPs0) << n->name();
    } else if (n->op() == "Variable") {
      ++variables;  // kernels, biases and their momentum slots
      EXPECT_EQ(n->assigned_device(), kPs0) << n->name();
    } else {
      EXPECT_EQ(n->assigned_device(), kW0) << n->DebugName();
    }
  }
  EXPECT_EQ(applies, 4);
  EXPECT_EQ(variables, 8);
  EXPECT_EQ(tg->graph->FindNode("layer0_dense/MatMul")->assigned_device(), kW0);
  EXPECT_EQ(tg->graph->FindNode(tg->train_op)->assigned_device(), kW0);
}

TEST(PlacerTest, AdamSlotsFollowTheirVariableAcrossPsTasks) {
  auto tg = LowerJob(Job(R"(model { input_shape: [8] num_classes: 3
      layer { dense { units: 3 } } } optimizer { adam {} })"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  ASSERT_EQ(tg->variables.size(), 2u);
  PlaceTrainingGraph(*tg, {"/job:ps/task:0", "/job:ps/task:1"});
  const Graph& g = *tg->graph;
  for (int i = 0; i < 2; ++i) {
    const std::string& v = tg->variables[i];
    const std::string want = i == 0 ? kPs0 : kPs1;
    EXPECT_EQ(g.FindNode(v)->assigned_device(), want) << v;
    int updates = 0;
    for (const auto& e : g.FindNode(v)->out_edges()) {
      if (e.dst->op() != "ApplyAdam") continue;
      ++updates;
      EXPECT_EQ(e.dst->assigned_device(), want) << e.dst->name();
      for (int k = 1; k <= 3; ++k) {  // m, v, t: slot variables
        const Node* slot = e.dst->input(k).node;
        EXPECT_EQ(slot->op(), "Variable");
        EXPECT_EQ(slot->assigned_device(), want) << slot->name();
      }
    }
    EXPECT_EQ(updates, 1) << v;
  }
}

TEST(PlacerTest, FeedsMoveToTheGpuThatConsumesAllOfThem) {
  constexpr char kGpu[] = "/job:worker/task:0/device:GPU:0";
  const std::vector<std::string> devices = {kW0, kGpu};
  // x feeds only GPU work; y feeds the GPU and the CPU; z feeds only the CPU.
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {2, 2}, "x");
  Output y = b.Placeholder(DType::kFloat32, {2, 2}, "y");
  Output z = b.Placeholder(DType::kFloat32, {2, 2}, "z");
  b.set_device(kGpu);
  ops::MatMul(&b, x, y, false, false, "on_gpu");
  ops::MatMul(&b, x, x, false, false, "on_gpu_too");
  b.set_device(kW0);
  ops::MatMul(&b, y, z, false, false, "on_cpu");
  ASSERT_TRUE(b.status().ok()) << b.status();
  ASSERT_TRUE(PlaceGraph(&g, devices, kW0).ok());
  ASSERT_EQ(g.FindNode("x")->assigned_device(), kW0);  // Placeholder has no GPU kernel
  PlaceFeedsWithConsumers(&g, {"x", "y", "z", "not_in_graph"});
  EXPECT_EQ(g.FindNode("x")->assigned_device(), kGpu);
  EXPECT_EQ(g.FindNode("y")->assigned_device(), kW0);
  EXPECT_EQ(g.FindNode("z")->assigned_device(), kW0);
}

}  // namespace
}  // namespace weft
