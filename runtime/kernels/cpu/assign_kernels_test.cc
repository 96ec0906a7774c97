// Assign and AssignAdd write through to the variable's store, forward the
// new value, and refuse a value of another dtype or shape, naming both.
#include "graph/builder.h"
#include "graph/ops/ops.h"
#include "gtest/gtest.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace {

using testing::FloatTensor;

class AssignTest : public ::testing::Test {
 protected:
  AssignTest() : device_("/device:CPU:0", 1), b_(&graph_) {}

  // Runs `op` (fed `value` as "value") once; its forwarded output, or the error.
  absl::StatusOr<Tensor> Run(const std::string& op, const Tensor& value, const TensorShape& var_shape) {
    device_.resources()->SetVariable("v", FloatTensor(var_shape, std::vector<float>(var_shape.num_elements(), 1.0f)));
    Output var = b_.Variable("v", DType::kFloat32, var_shape, "zeros");
    Output fed = b_.Placeholder(value.dtype(), TensorShape({-1}), "value");
    Output out = b_.Op(op, {var, fed});
    if (!b_.status().ok()) return b_.status();
    ExecutorOptions opts;
    opts.feeds = {"value"};
    opts.fetches = {out.name()};
    auto exec = Executor::Create(&graph_, &device_, opts);
    if (!exec.ok()) return exec.status();
    std::vector<Tensor> fetched;
    absl::Status s = (*exec)->Run({value}, &fetched, 1);
    if (!s.ok()) return s;
    return fetched[0];
  }

  std::vector<float> Stored() {
    Tensor v = *device_.resources()->LookupVariable("v");
    return std::vector<float>(v.data<float>(), v.data<float>() + v.NumElements());
  }

  CpuDevice device_;
  Graph graph_;
  GraphBuilder b_;
};

TEST_F(AssignTest, AssignOverwritesTheStoredVariable) {
  absl::StatusOr<Tensor> out = Run("Assign", FloatTensor({3}, {4, 5, 6}), TensorShape({3}));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Stored(), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(out->data<float>()[2], 6.0f);  // the forwarded variable holds the new value
}

TEST_F(AssignTest, AssignAddAddsInPlace) {
  absl::StatusOr<Tensor> out = Run("AssignAdd", FloatTensor({3}, {1, -2, 0.5f}), TensorShape({3}));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Stored(), (std::vector<float>{2, -1, 1.5f}));
}

TEST_F(AssignTest, AssignAddCountsInAnInt64Variable) {
  Tensor start = Tensor::Scalar<int64_t>(41);
  device_.resources()->SetVariable("step", start);
  Output var = b_.Variable("step", DType::kInt64, TensorShape({}), "zeros");
  Output one = b_.Const(Tensor::Scalar<int64_t>(1), "one");
  Output out = b_.Op("AssignAdd", {var, one});
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  ExecutorOptions opts;
  opts.fetches = {out.name()};
  auto exec = Executor::Create(&graph_, &device_, opts);
  ASSERT_TRUE(exec.ok()) << exec.status();
  std::vector<Tensor> fetched;
  ASSERT_TRUE((*exec)->Run({}, &fetched, 1).ok());
  EXPECT_EQ(fetched[0].data<int64_t>()[0], 42);
  EXPECT_EQ(device_.resources()->LookupVariable("step")->data<int64_t>()[0], 42);
}

TEST_F(AssignTest, AValueOfAnotherShapeIsRefusedAndTheVariableKept) {
  absl::StatusOr<Tensor> out = Run("Assign", FloatTensor({2}, {7, 8}), TensorShape({3}));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("does not have the variable's shape"), std::string::npos) << out.status();
  EXPECT_EQ(Stored(), (std::vector<float>{1, 1, 1}));
}

}  // namespace
}  // namespace weft
