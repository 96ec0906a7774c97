// Shape inference of the math/NN/array/training ops: inferred shapes, and
// rejections whose messages name the node and the offending shapes.
#include <string>

#include "graph/builder.h"
#include "graph/ops/ops.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

class OpShapesTest : public ::testing::Test {
 protected:
  OpShapesTest() : b_(&g_) {}
  Output F(TensorShape shape, const char* name) { return b_.Placeholder(DType::kFloat32, shape, name); }
  Output I(TensorShape shape, const char* name) { return b_.Placeholder(DType::kInt32, shape, name); }
  // Expects the builder to have failed with a message containing every piece.
  void ExpectError(std::initializer_list<std::string> pieces) {
    ASSERT_FALSE(b_.status().ok());
    EXPECT_EQ(b_.status().code(), absl::StatusCode::kInvalidArgument);
    for (const std::string& p : pieces) {
      EXPECT_NE(b_.status().message().find(p), std::string::npos) << "missing '" << p << "' in " << b_.status();
    }
  }
  Graph g_;
  GraphBuilder b_;
};

TEST_F(OpShapesTest, MatMulInfersAndRejects) {
  Output x = F({-1, 784}, "x");
  Output y = ops::MatMul(&b_, x, F({784, 256}, "w"));
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  EXPECT_EQ(y.shape(), (TensorShape{-1, 256}));
  EXPECT_EQ(ops::MatMul(&b_, x, F({10, 784}, "w2"), false, true).shape(), (TensorShape{-1, 10}));
  EXPECT_EQ(ops::MatMul(&b_, x, F({-1, 5}, "w3"), true, false).shape(), (TensorShape{784, 5}));
  ops::MatMul(&b_, x, F({100, 10}, "w4"), false, false, "dense_bad");
  ExpectError({"dense_bad", "MatMul", "[?,784] x [100,10]"});
}

TEST_F(OpShapesTest, MatMulRejectsIntegerAndVectorOperands) {
  ops::MatMul(&b_, I({2, 3}, "a"), F({3, 4}, "b"), false, false, "mm_int");
  ExpectError({"mm_int", "a must be float32, got int32"});
}

TEST_F(OpShapesTest, MatMulRejectsVectors) {
  ops::MatMul(&b_, F({3}, "a"), F({3, 4}, "b"), false, false, "mm_vec");
  ExpectError({"mm_vec", "a must have rank 2, got shape [3]"});
}

TEST_F(OpShapesTest, BiasAddChecksTheChannelDimension) {
  EXPECT_EQ(ops::BiasAdd(&b_, F({-1, 4, 4, 8}, "x"), F({8}, "b")).shape(), (TensorShape{-1, 4, 4, 8}));
  ops::BiasAdd(&b_, F({-1, 10}, "x2"), F({12}, "b2"), "bias_bad");
  ExpectError({"bias_bad", "bias [12]", "[?,10]"});
}

TEST_F(OpShapesTest, ElementwiseMergesUnknownDimsAndAcceptsScalars) {
  EXPECT_EQ(ops::Add(&b_, F({-1, 10}, "a"), F({32, -1}, "b")).shape(), (TensorShape{32, 10}));
  EXPECT_EQ(ops::Mul(&b_, F({-1, 10}, "c"), F({}, "s")).shape(), (TensorShape{-1, 10}));
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  ops::Sub(&b_, F({-1, 10}, "d"), F({-1, 5}, "e"), "sub_bad");
  ExpectError({"sub_bad", "[?,10] and [?,5]"});
}

TEST_F(OpShapesTest, AddNNeedsOneShape) {
  EXPECT_EQ(ops::AddN(&b_, {F({-1, 3}, "a"), F({4, 3}, "b")}).shape(), (TensorShape{4, 3}));
  ops::AddN(&b_, {F({4, 3}, "c"), F({4, 3}, "d"), F({3, 4}, "e")}, "addn_bad");
  ExpectError({"addn_bad", "input 2 has shape [3,4]"});
}

TEST_F(OpShapesTest, ReductionsAndTheirGradients) {
  Output x = F({-1, 7}, "x");
  Output s = ops::Sum(&b_, x);
  EXPECT_EQ(s.shape(), TensorShape{});
  EXPECT_EQ(ops::MeanGrad(&b_, s, x).shape(), (TensorShape{-1, 7}));
  ops::SumGrad(&b_, x, x, "sumgrad_bad");
  ExpectError({"sumgrad_bad", "gradient must have rank 0, got shape [?,7]"});
}

TEST_F(OpShapesTest, SparseXentChecksLabels) {
  auto xent = ops::SparseSoftmaxCrossEntropyWithLogits(&b_, F({-1, 10}, "logits"), I({64}, "labels"));
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  EXPECT_EQ(xent.loss.shape(), (TensorShape{64}));
  EXPECT_EQ(xent.backprop.shape(), (TensorShape{64, 10}));
  ops::SparseSoftmaxCrossEntropyWithLogits(&b_, F({-1, 10}, "l2"), F({-1}, "float_labels"), "xent_dtype");
  ExpectError({"xent_dtype", "labels must be int32, got float32"});
}

TEST_F(OpShapesTest, SparseXentChecksBatch) {
  ops::SparseSoftmaxCrossEntropyWithLogits(&b_, F({32, 10}, "logits"), I({64}, "labels"), "xent_batch");
  ExpectError({"xent_batch", "labels [64]", "logits [32,10]"});
}

TEST_F(OpShapesTest, Conv2DShapes) {
  Output x = F({-1, 28, 28, 1}, "x");
  EXPECT_EQ(ops::Conv2D(&b_, x, F({5, 5, 1, 32}, "f1"), 1, "SAME").shape(), (TensorShape{-1, 28, 28, 32}));
  EXPECT_EQ(ops::Conv2D(&b_, x, F({5, 5, 1, 32}, "f2"), 1, "VALID").shape(), (TensorShape{-1, 24, 24, 32}));
  EXPECT_EQ(ops::Conv2D(&b_, x, F({3, 3, 1, 8}, "f3"), 2, "SAME").shape(), (TensorShape{-1, 14, 14, 8}));
  EXPECT_EQ(ops::Conv2D(&b_, x, F({3, 3, 1, 8}, "f4"), 2, "VALID").shape(), (TensorShape{-1, 13, 13, 8}));
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  ops::Conv2D(&b_, x, F({3, 3, 3, 8}, "f5"), 1, "SAME", "conv_bad");
  ExpectError({"conv_bad", "[?,28,28,1] has 1 channels but filter [3,3,3,8] expects 3"});
}

TEST_F(OpShapesTest, Conv2DRejectsWindowLargerThanValidInput) {
  ops::Conv2D(&b_, F({-1, 4, 4, 1}, "x"), F({5, 5, 1, 2}, "f"), 1, "VALID", "conv_small");
  ExpectError({"conv_small", "input height 4 is smaller than the window size 5"});
}

TEST_F(OpShapesTest, Conv2DRejectsBadPadding) {
  ops::Conv2D(&b_, F({-1, 4, 4, 1}, "x"), F({3, 3, 1, 2}, "f"), 1, "FULL", "conv_pad");
  ExpectError({"conv_pad", "padding must be \"SAME\" or \"VALID\""});
}

TEST_F(OpShapesTest, ConvBackpropChecksTheGradientShape) {
  Output x = F({-1, 8, 8, 2}, "x"), f = F({3, 3, 2, 4}, "f");
  EXPECT_EQ(ops::Conv2DBackpropFilter(&b_, x, f, F({-1, 8, 8, 4}, "g"), 1, "SAME").shape(),
            (TensorShape{3, 3, 2, 4}));
  ops::Conv2DBackpropInput(&b_, x, f, F({-1, 6, 6, 4}, "g2"), 1, "SAME", "dx_bad");
  ExpectError({"dx_bad", "gradient [?,6,6,4]", "[?,8,8,4]"});
}

TEST_F(OpShapesTest, MaxPoolShapes) {
  Output x = F({-1, 7, 7, 3}, "x");
  EXPECT_EQ(ops::MaxPool(&b_, x, 2).shape(), (TensorShape{-1, 3, 3, 3}));
  EXPECT_EQ(ops::MaxPool(&b_, x, 2, 2, "SAME").shape(), (TensorShape{-1, 4, 4, 3}));
  EXPECT_EQ(ops::MaxPool(&b_, x, 3, 1, "SAME").shape(), (TensorShape{-1, 7, 7, 3}));
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  ops::MaxPool(&b_, F({-1, 28, 28}, "x3"), 2, 2, "VALID", "pool_rank");
  ExpectError({"pool_rank", "must have rank 4", "[?,28,28]"});
}

TEST_F(OpShapesTest, ReshapeInfersTheUnknownDim) {
  EXPECT_EQ(ops::Reshape(&b_, F({-1, 784}, "x"), {-1, 28, 28, 1}).shape(), (TensorShape{-1, 28, 28, 1}));
  EXPECT_EQ(ops::Reshape(&b_, F({6, 4}, "y"), {3, -1}).shape(), (TensorShape{3, 8}));
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  ops::Reshape(&b_, F({6, 4}, "z"), {5, -1}, "reshape_bad");
  ExpectError({"reshape_bad", "cannot reshape [6,4] (24 elements) to [5,-1]"});
}

TEST_F(OpShapesTest, ReshapeRejectsTwoUnknowns) {
  ops::Reshape(&b_, F({6, 4}, "z"), {-1, -1}, "reshape_two");
  ExpectError({"reshape_two", "more than one -1"});
}

TEST_F(OpShapesTest, EqualArgMaxCast) {
  EXPECT_EQ(ops::ArgMax(&b_, F({-1, 10}, "logits")).shape(), (TensorShape{-1}));
  EXPECT_EQ(ops::Cast(&b_, I({-1}, "i"), DType::kFloat32).dtype(), DType::kFloat32);
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  ops::Equal(&b_, I({-1}, "a"), F({-1}, "b"), "eq_bad");
  ExpectError({"eq_bad", "same dtype, got int32 and float32"});
}

TEST_F(OpShapesTest, CastRejectsUnsupportedTypes) {
  ops::Cast(&b_, F({3}, "x"), DType::kFloat16, "cast_bad");
  ExpectError({"cast_bad", "cannot cast float32 to float16"});
}

TEST_F(OpShapesTest, DropoutRejectsRateOne) {
  ops::Dropout(&b_, F({-1, 3}, "x"), 1.0f, 0, "drop_bad");
  ExpectError({"drop_bad", "rate must be in [0, 1), got 1"});
}

TEST_F(OpShapesTest, AdamNeedsAScalarCount) {
  Output w = F({3}, "w");
  ops::ApplyAdam(&b_, w, F({3}, "m"), F({3}, "v"), F({1}, "t"), F({3}, "g"), 0.1f, 0.9f, 0.999f, 1e-7f, "adam_bad");
  ExpectError({"adam_bad", "t (the update count) must have rank 0"});
}

}  // namespace
}  // namespace weft
