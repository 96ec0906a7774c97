// Reshape, ReshapeLike and Cast kernels.
#include <limits>

#include "graph/builder.h"
#include "graph/ops/ops.h"
#include "gtest/gtest.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace {

using testing::FloatTensor;
using testing::IntTensor;
using testing::RandomTensor;

TEST(ReshapeKernelTest, InfersTheBatchAndSharesTheBuffer) {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {-1, 784}, "x");
  Output img = ops::Reshape(&b, x, {-1, 28, 28, 1});
  Output back = ops::ReshapeLike(&b, img, x);
  ASSERT_TRUE(b.status().ok()) << b.status();
  EXPECT_EQ(img.shape(), (TensorShape{-1, 28, 28, 1}));
  Tensor in = RandomTensor({3, 784}, 1);
  CpuDevice device("/device:CPU:0", 1);
  auto r = RunGraphOnce(g, &device, {{"x", in}}, {img.name(), back.name()});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (TensorShape{3, 28, 28, 1}));
  EXPECT_TRUE((*r)[0].SharesBufferWith(in));
  EXPECT_EQ((*r)[1].shape(), (TensorShape{3, 784}));
  EXPECT_TRUE((*r)[1].SharesBufferWith(in));
}

TEST(ReshapeKernelTest, IndivisibleRunTimeSizeIsAnError) {
  Graph g;
  GraphBuilder b(&g);
  Output img = ops::Reshape(&b, b.Placeholder(DType::kFloat32, {-1, 10}, "x"), {-1, 4}, "to_four");
  CpuDevice device("/device:CPU:0", 1);
  auto r = RunGraphOnce(g, &device, {{"x", RandomTensor({3, 10}, 1)}}, {img.name()});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("to_four"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("cannot reshape [3,10] (30 elements) to [-1,4]"), std::string::npos)
      << r.status();
}

TEST(CastKernelTest, ConvertsBetweenTypes) {
  Graph g;
  GraphBuilder b(&g);
  Output f = b.Placeholder(DType::kFloat32, {-1}, "f");
  Output i = b.Placeholder(DType::kInt32, {-1}, "i");
  Output f2i = ops::Cast(&b, f, DType::kInt32);
  Output f2b = ops::Cast(&b, f, DType::kBool);
  Output i2f = ops::Cast(&b, i, DType::kFloat32);
  Output i2l = ops::Cast(&b, i, DType::kInt64);
  Output b2f = ops::Cast(&b, f2b, DType::kFloat32);
  ASSERT_TRUE(b.status().ok()) << b.status();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor fv = FloatTensor({6}, {1.7f, -2.5f, 0.0f, 3e10f, -3e10f, nan});
  Tensor iv = IntTensor({3}, {-4, 0, 7});
  CpuDevice device("/device:CPU:0", 1);
  auto r = RunGraphOnce(g, &device, {{"f", fv}, {"i", iv}},
                        {f2i.name(), f2b.name(), i2f.name(), i2l.name(), b2f.name()});
  ASSERT_TRUE(r.ok()) << r.status();
  const int32_t* a = (*r)[0].data<int32_t>();
  EXPECT_EQ(a[0], 1);
  EXPECT_EQ(a[1], -2);
  EXPECT_EQ(a[2], 0);
  EXPECT_EQ(a[3], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(a[4], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(a[5], 0);
  const bool* bo = (*r)[1].data<bool>();
  EXPECT_TRUE(bo[0]);
  EXPECT_FALSE(bo[2]);
  EXPECT_EQ((*r)[2].data<float>()[0], -4.0f);
  EXPECT_EQ((*r)[2].data<float>()[2], 7.0f);
  EXPECT_EQ((*r)[3].dtype(), DType::kInt64);
  EXPECT_EQ((*r)[3].data<int64_t>()[2], 7);
  EXPECT_EQ((*r)[4].data<float>()[0], 1.0f);
  EXPECT_EQ((*r)[4].data<float>()[2], 0.0f);
}

}  // namespace
}  // namespace weft
