// Kernels reached by a graph whose inference never ran (issue 17): each
// re-checks its attributes and run-time shapes with overflow-safe
// arithmetic, and an allocation too large for the daemon is
// RESOURCE_EXHAUSTED naming the node, never a crash.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/tensor_proto_coding.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "gtest/gtest.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace {

using testing::FloatTensor;
using testing::RunKernelSkippingInference;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

NodeDef Def(const std::string& name, const std::string& op, const AttrList& attrs) {
  NodeDef def;
  def.set_name(name);
  def.set_op(op);
  for (const auto& [k, v] : attrs) (*def.mutable_attr())[k] = v;
  return def;
}

NodeDef VariableDef(const std::string& name, const TensorShape& shape, const TensorShape& init_shape,
                    int64_t row_offset, const std::string& initializer = "zeros") {
  return Def(name, "Variable",
             {Attr("dtype", DType::kFloat32), Attr("shape", shape), Attr("init_shape", init_shape),
              Attr("row_offset", row_offset), Attr("initializer", initializer), Attr("init_name", "w")});
}

// Expects `r` to fail with `code`, naming `node` and each of `parts`.
template <typename R>
void ExpectError(const R& r, absl::StatusCode code, const std::string& node, std::vector<std::string> parts) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status();
  parts.push_back("'" + node + "'");
  for (const std::string& p : parts) EXPECT_NE(Msg(r.status()).find(p), std::string::npos) << p << " in " << r.status();
}

class CheckedKernelsTest : public ::testing::Test {
 protected:
  CpuDevice device_{"/device:CPU:0", 1};
};

TEST_F(CheckedKernelsTest, SliceRowsBeginNearInt64MaxIsRefused) {
  Tensor x = FloatTensor({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  auto r = RunKernelSkippingInference(
      Def("slice", "SliceRows", {Attr("begin", kInt64Max - 1), Attr("size", int64_t{4})}), {x}, {DType::kFloat32},
      &device_);
  ExpectError(r, absl::StatusCode::kInvalidArgument, "slice", {"begin", "size", "64 bits"});
}

TEST_F(CheckedKernelsTest, SliceRowsOutsideTheInputIsRefusedAndInsideIsCopied) {
  Tensor x = FloatTensor({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  auto outside = RunKernelSkippingInference(
      Def("slice", "SliceRows", {Attr("begin", int64_t{3}), Attr("size", int64_t{2})}), {x}, {DType::kFloat32},
      &device_);
  ExpectError(outside, absl::StatusCode::kInvalidArgument, "slice", {"outside [4,2]"});

  auto inside = RunKernelSkippingInference(
      Def("slice", "SliceRows", {Attr("begin", int64_t{2}), Attr("size", int64_t{2})}), {x}, {DType::kFloat32},
      &device_);
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_EQ((*inside)[0].shape(), (TensorShape{2, 2}));
  EXPECT_EQ((*inside)[0].data<float>()[0], 4.0f);
  EXPECT_EQ((*inside)[0].data<float>()[3], 7.0f);
}

TEST_F(CheckedKernelsTest, ConcatRowsRefusesShardsThatDifferPastDimZero) {
  auto r = RunKernelSkippingInference(Def("concat", "ConcatRows", {}),
                                      {FloatTensor({1, 2}, {1, 2}), FloatTensor({1, 3}, {3, 4, 5})},
                                      {DType::kFloat32}, &device_);
  ExpectError(r, absl::StatusCode::kInvalidArgument, "concat", {"shard 1", "[1,3]"});
}

TEST_F(CheckedKernelsTest, ReshapeWhoseTargetSizeWrapsIsRefused) {
  // 4611686018427387905 * 4 wraps to 4, the input's element count.
  Tensor x = FloatTensor({4}, {1, 2, 3, 4});
  auto r = RunKernelSkippingInference(
      Def("reshape", "Reshape", {Attr("shape", std::vector<int64_t>{4611686018427387905, 4})}), {x},
      {DType::kFloat32}, &device_);
  ExpectError(r, absl::StatusCode::kInvalidArgument, "reshape", {"attribute 'shape'", "overflows"});

  auto negative = RunKernelSkippingInference(Def("reshape", "Reshape", {Attr("shape", std::vector<int64_t>{-2, -2})}),
                                             {x}, {DType::kFloat32}, &device_);
  ExpectError(negative, absl::StatusCode::kInvalidArgument, "reshape", {"attribute 'shape'", "negative"});

  auto ok = RunKernelSkippingInference(Def("reshape", "Reshape", {Attr("shape", std::vector<int64_t>{2, -1})}), {x},
                                       {DType::kFloat32}, &device_);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].shape(), (TensorShape{2, 2}));
}

TEST_F(CheckedKernelsTest, VariableWhoseInitShapeExceedsMemoryIsResourceExhausted) {
  // 2^40 floats, 4 TiB: more than the daemon's budget, and the 2^40 elements
  // ShapeFromProto allows. The shape function accepts it (the budget is the
  // daemon's), so this is the kernel's to refuse.
  auto r = RunKernelSkippingInference(VariableDef("huge", {1, 1}, {int64_t{1} << 40, 1}, 0), {}, {DType::kFloat32},
                                      &device_);
  ExpectError(r, absl::StatusCode::kResourceExhausted, "huge", {"init_shape", "4398046511104 bytes"});
}

TEST_F(CheckedKernelsTest, VariableWithNoRowsAndOtherTrailingDimsIsAnErrorNotSigfpe) {
  auto r = RunKernelSkippingInference(VariableDef("empty", {0, 1}, {0, 2}, 0), {}, {DType::kFloat32}, &device_);
  ExpectError(r, absl::StatusCode::kInvalidArgument, "empty", {"init_shape", "[0,2]", "differ in dim 1"});
}

TEST_F(CheckedKernelsTest, VariableRowsOutsideInitShapeAreRefused) {
  auto r = RunKernelSkippingInference(VariableDef("shard", {2, 3}, {4, 3}, kInt64Max - 1), {}, {DType::kFloat32},
                                      &device_);
  ExpectError(r, absl::StatusCode::kInvalidArgument, "shard", {"row_offset", "outside"});
}

TEST_F(CheckedKernelsTest, VariableShardHoldsItsRowsOfTheWholeVariable) {
  auto whole = RunKernelSkippingInference(VariableDef("whole", {5, 3}, {5, 3}, 0, "glorot_uniform"), {},
                                          {DType::kFloat32}, &device_);
  auto shard = RunKernelSkippingInference(VariableDef("shard", {2, 3}, {5, 3}, 2, "glorot_uniform"), {},
                                          {DType::kFloat32}, &device_);
  auto empty = RunKernelSkippingInference(VariableDef("none", {0, 3}, {5, 3}, 5, "glorot_uniform"), {},
                                          {DType::kFloat32}, &device_);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(shard.ok()) << shard.status();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ((*empty)[0].shape(), (TensorShape{0, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ((*shard)[0].data<float>()[i], (*whole)[0].data<float>()[6 + i]) << i;
  EXPECT_NE((*shard)[0].data<float>()[0], 0.0f);
}

}  // namespace
}  // namespace weft
