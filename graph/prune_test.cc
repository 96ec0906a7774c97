#include "graph/prune.h"

#include <set>

#include "graph/builder.h"
#include "graph/ops/ops.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

std::set<std::string> Names(const Graph& g) {
  std::set<std::string> names;
  for (const auto& n : g.nodes()) names.insert(n->name());
  return names;
}

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// x -> a=Relu -> c=Sigmoid;  y -> b=Tanh;  x -> drop=Dropout -> sum=Add(drop:0, drop:1)
// z (Placeholder) --ctrl--> d=Identity(x);  group=NoOp with ^b.
class PruneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GraphBuilder b(&g_);
    Output x = b.Placeholder(DType::kFloat32, {-1, 4}, "x");
    Output y = b.Placeholder(DType::kFloat32, {-1, 4}, "y");
    Output z = b.Placeholder(DType::kFloat32, {-1, 4}, "z");
    b.set_device("/job:worker/task:0");
    Output a = ops::Relu(&b, x, "a");
    b.set_device("");
    ops::Sigmoid(&b, a, "c");
    Output bb = ops::Tanh(&b, y, "b");
    ops::DropoutOutputs drop = ops::Dropout(&b, x, 0.5f, 1, "drop");
    ops::Add(&b, drop.y, drop.mask, "sum");
    b.AddNode("Identity", {x}, {}, "d", {z.node});
    b.AddNode("NoOp", {}, {}, "group", {bb.node});
    ASSERT_TRUE(b.status().ok()) << b.status();
    g_.FindNode("a")->set_assigned_device("/job:worker/task:0/device:CPU:0");
  }

  std::unique_ptr<Graph> Prune(const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
                               const std::vector<std::string>& targets) {
    std::unique_ptr<Graph> out;
    absl::Status s = PruneGraph(g_, feeds, fetches, targets, &out);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  Graph g_;
};

TEST_F(PruneTest, DropsUnneededBranches) {
  auto out = Prune({}, {"c"}, {});
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(Names(*out), (std::set<std::string>{"x", "a", "c"}));
  // Kept nodes keep their requests and placement.
  EXPECT_EQ(out->FindNode("a")->requested_device(), "/job:worker/task:0");
  EXPECT_EQ(out->FindNode("a")->assigned_device(), "/job:worker/task:0/device:CPU:0");
  EXPECT_EQ(out->FindNode("c")->input(0).node->name(), "a");
}

TEST_F(PruneTest, FeedCutsUpstreamNodes) {
  auto out = Prune({"a"}, {"c"}, {});
  ASSERT_NE(out, nullptr);
  // Neither `a` nor the unfed placeholder `x` above it is needed any more.
  EXPECT_EQ(Names(*out), (std::set<std::string>{"_feed/a_0", "c"}));
  const Node* feed = out->FindNode("_feed/a_0");
  EXPECT_EQ(feed->op(), "Placeholder");
  EXPECT_EQ(feed->output_type(0), DType::kFloat32);
  EXPECT_EQ(feed->output_shape(0), TensorShape({-1, 4}));
  EXPECT_EQ(feed->requested_device(), "/job:worker/task:0");
  EXPECT_EQ(out->FindNode("c")->input(0).node, feed);
  EXPECT_EQ(FeedNodeName("a"), "_feed/a_0");
  EXPECT_EQ(FeedNodeName("scope/n:2"), "_feed/scope/n_2");
}

TEST_F(PruneTest, FeedingOneOutputKeepsTheProducerForTheOthers) {
  auto out = Prune({"drop:0"}, {"sum"}, {});
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(Names(*out), (std::set<std::string>{"_feed/drop_0", "x", "drop", "sum"}));
  const Node* sum = out->FindNode("sum");
  EXPECT_EQ(sum->input(0).node->name(), "_feed/drop_0");
  EXPECT_EQ(sum->input(1).node->name(), "drop");
  EXPECT_EQ(sum->input(1).index, 1);
}

TEST_F(PruneTest, ControlInputsAreKept) {
  auto out = Prune({}, {}, {"group"});
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(Names(*out), (std::set<std::string>{"group", "b", "y"}));
  ASSERT_EQ(out->FindNode("group")->control_inputs().size(), 1u);
  EXPECT_EQ(out->FindNode("group")->control_inputs()[0]->name(), "b");
}

TEST_F(PruneTest, FedPlaceholderHandsOverItsControlEdges) {
  auto out = Prune({"z"}, {"d"}, {});
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(Names(*out), (std::set<std::string>{"_feed/z_0", "x", "d"}));
  ASSERT_EQ(out->FindNode("d")->control_inputs().size(), 1u);
  EXPECT_EQ(out->FindNode("d")->control_inputs()[0]->name(), "_feed/z_0");
  // Without the feed, the placeholder itself is kept.
  auto unfed = Prune({}, {"d"}, {});
  EXPECT_EQ(Names(*unfed), (std::set<std::string>{"z", "x", "d"}));
}

TEST_F(PruneTest, FetchOfAFedTensorIsServedByItsPlaceholder) {
  auto out = Prune({"a:0", "a"}, {"a"}, {});  // a repeated feed counts once
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(Names(*out), (std::set<std::string>{"_feed/a_0"}));
}

TEST_F(PruneTest, UnknownNamesAreErrors) {
  std::unique_ptr<Graph> out;
  absl::Status s = PruneGraph(g_, {"nope:0"}, {"c"}, {}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(s).find("feed 'nope:0'"), std::string::npos) << s;

  s = PruneGraph(g_, {}, {"missing"}, {}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(s).find("fetch 'missing'"), std::string::npos) << s;

  s = PruneGraph(g_, {}, {"a:3"}, {}, &out);
  EXPECT_NE(Msg(s).find("fetch 'a:3'"), std::string::npos) << s;

  s = PruneGraph(g_, {}, {}, {"nothing_here"}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(s).find("target 'nothing_here'"), std::string::npos) << s;

  s = PruneGraph(g_, {}, {}, {}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out, nullptr);
}

}  // namespace
}  // namespace weft
