// Shape functions refuse sizes that overflow 64 bits (issue 17): each error
// is INVALID_ARGUMENT naming the node and the attribute or input at fault.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "graph/attr.h"
#include "graph/graph.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

NodeDef Def(const std::string& name, const std::string& op, const AttrList& attrs,
            const std::vector<std::string>& inputs = {}) {
  NodeDef def;
  def.set_name(name);
  def.set_op(op);
  for (const auto& [k, v] : attrs) (*def.mutable_attr())[k] = v;
  for (const std::string& in : inputs) def.add_input(in);
  return def;
}

class CheckedShapesTest : public ::testing::Test {
 protected:
  Node* Input(const std::string& name, const TensorShape& shape) {
    auto n = g_.AddNode(Def(name, "Placeholder", {Attr("dtype", DType::kFloat32), Attr("shape", shape)}));
    EXPECT_TRUE(n.ok()) << n.status();
    return n.ok() ? *n : nullptr;
  }
  void ExpectRefused(const NodeDef& def, std::vector<std::string> parts) {
    auto n = g_.AddNode(def);
    ASSERT_FALSE(n.ok()) << def.ShortDebugString();
    EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument) << n.status();
    parts.push_back("node '" + def.name() + "' (" + def.op() + ")");
    for (const std::string& p : parts) EXPECT_NE(Msg(n.status()).find(p), std::string::npos) << p << " in " << n.status();
  }
  Graph g_;
};

TEST(TensorShapeOverflowTest, NumElementsNeverWraps) {
  // 4611686018427387905 * 4 = 2^64 + 4: a wrapping product would say 4.
  EXPECT_EQ((TensorShape{4611686018427387905, 4}).num_elements(), -1);
  EXPECT_EQ((TensorShape{int64_t{1} << 32, int64_t{1} << 32}).num_elements(), -1);
  EXPECT_EQ((TensorShape{int64_t{1} << 32, int64_t{1} << 32, 0}).num_elements(), 0);
  EXPECT_EQ((TensorShape{int64_t{1} << 31, int64_t{1} << 31}).num_elements(), int64_t{1} << 62);
}

TEST_F(CheckedShapesTest, SliceRowsBeginNearInt64Max) {
  Input("x", {4, 2});
  ExpectRefused(Def("slice", "SliceRows", {Attr("begin", kInt64Max - 1), Attr("size", int64_t{4})}, {"x"}),
                {"begin", "size", "64 bits"});
  // Unknown rows: the attrs alone still cannot overflow.
  Input("u", {-1, 2});
  ExpectRefused(Def("slice_u", "SliceRows", {Attr("begin", kInt64Max), Attr("size", int64_t{1})}, {"u"}),
                {"begin", "size"});
  ExpectRefused(Def("slice_out", "SliceRows", {Attr("begin", int64_t{3}), Attr("size", int64_t{2})}, {"x"}),
                {"outside [4,2]"});
  EXPECT_TRUE(g_.AddNode(Def("slice_ok", "SliceRows", {Attr("begin", int64_t{2}), Attr("size", int64_t{2})}, {"x"}))
                  .ok());
}

TEST_F(CheckedShapesTest, ConcatRowsRefusesShardsThatDifferPastDimZero) {
  Input("a", {2, 3});
  Input("b", {2, 4});
  ExpectRefused(Def("concat", "ConcatRows", {}, {"a", "b"}), {"shard 1 differs in dim 1"});
}

TEST_F(CheckedShapesTest, ReshapeWhoseTargetSizeWraps) {
  Input("x", {4});
  ExpectRefused(Def("reshape", "Reshape", {Attr("shape", std::vector<int64_t>{4611686018427387905, 4})}, {"x"}),
                {"attribute 'shape'", "overflows"});
  Input("u", {-1, 4});
  ExpectRefused(Def("reshape_u", "Reshape", {Attr("shape", std::vector<int64_t>{4611686018427387905, 4})}, {"u"}),
                {"attribute 'shape'", "overflows"});
  auto ok = g_.AddNode(Def("reshape_ok", "Reshape", {Attr("shape", std::vector<int64_t>{2, -1})}, {"x"}));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->output_shape(0), (TensorShape{2, 2}));
}

TEST_F(CheckedShapesTest, MaxPoolWindowThatOverflowsWithSamePadding) {
  Input("img", {1, 4, 4, 1});
  ExpectRefused(Def("pool", "MaxPool", {Attr("ksize", kInt64Max), Attr("stride", int64_t{1}), Attr("padding", "SAME")},
                    {"img"}),
                {"window size", "overflows"});
}

NodeDef VariableDef(const std::string& name, const TensorShape& shape, const TensorShape& init_shape,
                    int64_t row_offset) {
  return Def(name, "Variable",
             {Attr("dtype", DType::kFloat32), Attr("shape", shape), Attr("init_shape", init_shape),
              Attr("row_offset", row_offset)});
}

TEST_F(CheckedShapesTest, VariableInitShapeMustHoldTheShardsRows) {
  ExpectRefused(VariableDef("empty", {0, 1}, {0, 2}, 0), {"attribute 'init_shape' [0,2]", "differ in dim 1"});
  ExpectRefused(VariableDef("rank", {2}, {4, 1}, 0), {"init_shape", "same rank"});
  ExpectRefused(VariableDef("offset", {2, 3}, {4, 3}, kInt64Max - 1), {"row_offset", "outside"});
  ExpectRefused(VariableDef("negative", {2, 3}, {4, 3}, -1), {"row_offset", "outside"});
  ExpectRefused(VariableDef("unknown", {2, 3}, {-1, 3}, 0), {"attribute 'init_shape'", "fully defined"});
  EXPECT_TRUE(g_.AddNode(VariableDef("ok", {2, 3}, {4, 3}, 2)).ok());
  EXPECT_TRUE(g_.AddNode(VariableDef("no_rows", {0, 3}, {4, 3}, 4)).ok());
}

TEST_F(CheckedShapesTest, VariableShapeMustBeFullyDefined) {
  ExpectRefused(Def("v", "Variable", {Attr("dtype", DType::kFloat32), Attr("shape", TensorShape{-1, 3})}),
                {"attribute 'shape'", "fully defined"});
}

// The attributes of this stop's ops, as a crafted graph from the network
// would set them: each refused by name before any kernel exists.
TEST_F(CheckedShapesTest, MixedPrecisionAndSparseRowAttributesAreChecked) {
  ASSERT_NE(Input("x", {4, 4}), nullptr);
  ASSERT_NE(Input("s", {}), nullptr);
  ExpectRefused(Def("mm", "MatMul", {Attr("compute_type", "float8")}, {"x", "x"}), {"compute_type", "'float8'"});
  ExpectRefused(Def("ar", "CollectiveAllReduce",
                    {Attr("group_size", int64_t{2}), Attr("group_key", int64_t{1}), Attr("instance_key", int64_t{1}),
                     Attr("wire_dtype", "int8")},
                    {"x"}),
                {"wire_dtype must be float32 or float16", "'int8'"});
  ExpectRefused(Def("rows", "EmbeddingGradRows", {Attr("num_rows", int64_t{1} << 40)}, {"x", "x"}),
                {"num_rows must be in [0, 2^31)"});
  ExpectRefused(Def("scale", "ApplyLossScale", {Attr("growth_interval", int64_t{0})}, {"s", "s", "s"}),
                {"growth_interval must be positive"});
}

}  // namespace
}  // namespace weft
