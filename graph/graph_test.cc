#include "graph/graph.h"

#include "google/protobuf/text_format.h"
#include "graph/builder.h"
#include "graph/gradients.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

GraphDef Parse(const std::string& text) {
  GraphDef def;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &def)) << text;
  return def;
}

constexpr char kPlaceholderAttrs[] =
    "attr { key: 'dtype' value { type: DT_FLOAT } } "
    "attr { key: 'shape' value { shape { dim: -1 dim: 4 } } }";

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

TEST(GraphTest, SortsNodesGivenInAnyOrder) {
  auto g = Graph::FromGraphDef(Parse(std::string("node { name: 'y' op: 'Identity' input: 'x' } "
                                                 "node { name: 'x' op: 'Placeholder' ") +
                                     kPlaceholderAttrs + " }"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->node(0)->name(), "x");
  EXPECT_EQ((*g)->FindNode("y")->output_shape(0).DebugString(), "[?,4]");
  EXPECT_EQ((*g)->FindNode("x")->out_edges().size(), 1u);
}

TEST(GraphTest, RejectsCycleNamingItsNodes) {
  auto g = Graph::FromGraphDef(Parse("node { name: 'a' op: 'Identity' input: 'c' } "
                                     "node { name: 'b' op: 'Identity' input: 'a' } "
                                     "node { name: 'c' op: 'Identity' input: 'b' }"));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(Msg(g.status()).find("cycle"), std::string::npos) << g.status();
  for (const char* n : {"a", "b", "c"}) EXPECT_NE(Msg(g.status()).find(n), std::string::npos);
}

TEST(GraphTest, RejectsUnknownOpDanglingInputAndDuplicates) {
  auto unknown = Graph::FromGraphDef(Parse("node { name: 'n1' op: 'Frobnicate' }"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(Msg(unknown.status()).find("unknown op 'Frobnicate'"), std::string::npos) << unknown.status();
  EXPECT_NE(Msg(unknown.status()).find("n1"), std::string::npos);

  auto dangling = Graph::FromGraphDef(Parse("node { name: 'n1' op: 'Identity' input: 'ghost' }"));
  ASSERT_FALSE(dangling.ok());
  EXPECT_NE(Msg(dangling.status()).find("'ghost' names no node"), std::string::npos) << dangling.status();

  auto dup = Graph::FromGraphDef(Parse("node { name: 'n' op: 'NoOp' } node { name: 'n' op: 'NoOp' }"));
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(Msg(dup.status()).find("two nodes named 'n'"), std::string::npos);

  auto bad_index = Graph::FromGraphDef(Parse(std::string("node { name: 'x' op: 'Placeholder' ") + kPlaceholderAttrs +
                                             " } node { name: 'y' op: 'Identity' input: 'x:3' }"));
  ASSERT_FALSE(bad_index.ok());
  EXPECT_NE(Msg(bad_index.status()).find("output 3"), std::string::npos) << bad_index.status();
}

TEST(GraphTest, ShapeErrorsNameTheNodeAndShapes) {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {-1, 784}, "x");
  Output w = b.Variable("w", DType::kFloat32, {100, 10}, "zeros");
  Output y = b.Op("MatMul", {x, w}, {}, "bad_matmul");
  EXPECT_FALSE(y.valid());
  ASSERT_FALSE(b.status().ok());
  EXPECT_NE(Msg(b.status()).find("bad_matmul"), std::string::npos) << b.status();
  EXPECT_NE(Msg(b.status()).find("784"), std::string::npos) << b.status();
  // Every later call is a no-op returning an invalid output.
  EXPECT_FALSE(b.Op("Relu", {x}).valid());
}

TEST(GraphTest, RoundTripsThroughGraphDef) {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {-1, 4}, "x");
  {
    NameScope scope(&b, "block");
    b.Op("Relu", {x});
    b.Op("Relu", {x});
  }
  ASSERT_TRUE(b.status().ok()) << b.status();
  EXPECT_NE(g.FindNode("block/Relu_1"), nullptr);
  auto copy = Graph::FromGraphDef(g.ToGraphDef());
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ((*copy)->num_nodes(), g.num_nodes());
  EXPECT_EQ((*copy)->FindNode("block/Relu_1")->input(0).node->name(), "x");
}

TEST(GradientsTest, RejectsNonScalarLossAndUnrelatedVariables) {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {2, 3}, "x");
  Output w = b.Variable("w", DType::kFloat32, {3, 3}, "ones");
  Output unused = b.Variable("unused", DType::kFloat32, {3}, "ones");
  Output y = b.Op("MatMul", {x, w});
  auto not_scalar = AddGradients(&b, y, {w});
  ASSERT_FALSE(not_scalar.ok());
  EXPECT_NE(Msg(not_scalar.status()).find("scalar"), std::string::npos);
  Output loss = b.Op("Sum", {y});
  auto unrelated = AddGradients(&b, loss, {unused});
  ASSERT_FALSE(unrelated.ok());
  EXPECT_NE(Msg(unrelated.status()).find("unused"), std::string::npos) << unrelated.status();
  auto ok = AddGradients(&b, loss, {w});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].shape(), TensorShape({3, 3}));
}

TEST(GradientsTest, IntegerPathsCarryNoGradient) {
  Graph g;
  GraphBuilder b(&g);
  Output w = b.Variable("w", DType::kFloat32, {4, 3}, "ones");
  Output idx = b.Op("ArgMax", {w});
  Output loss = b.Op("Sum", {b.Op("Cast", {idx}, {Attr("dtype", DType::kFloat32)})});
  auto grads = AddGradients(&b, loss, {w});
  ASSERT_FALSE(grads.ok());
  // ArgMax's integer output stops the gradient: w does not affect the loss.
  EXPECT_NE(Msg(grads.status()).find("no gradient reaches 'w'"), std::string::npos) << grads.status();
}

}  // namespace
}  // namespace weft
