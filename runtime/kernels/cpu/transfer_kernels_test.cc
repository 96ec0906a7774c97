// PackTensors and UnpackTensors kernels.
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/ops/ops.h"
#include "gtest/gtest.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace {

using testing::RandomTensor;

AttrList UnpackAttrs(std::vector<int64_t> ranks, std::vector<int64_t> dims) {
  return {Attr("T", DType::kFloat32), Attr("num_outputs", static_cast<int64_t>(ranks.size())),
          Attr("ranks", ranks), Attr("dims", dims)};
}

TEST(TransferKernelTest, UnpackInvertsPack) {
  Graph g;
  GraphBuilder b(&g);
  Output a = b.Placeholder(DType::kFloat32, {2, 3}, "a");
  Output s = b.Placeholder(DType::kFloat32, {}, "s");
  Output e = b.Placeholder(DType::kFloat32, {0, 4}, "e");
  Output c = b.Placeholder(DType::kFloat32, {7}, "c");
  Output packed = b.Op("PackTensors", {a, s, e, c}, {}, "pack");
  Node* unpack = b.AddNode("UnpackTensors", {packed}, UnpackAttrs({2, 0, 2, 1}, {2, 3, 0, 4, 7}), "unpack");
  ASSERT_TRUE(b.status().ok()) << b.status();
  EXPECT_EQ(packed.shape(), TensorShape({6 + 1 + 0 + 7}));
  ASSERT_EQ(unpack->num_outputs(), 4);
  EXPECT_EQ(unpack->output_shape(2), TensorShape({0, 4}));

  const Tensor in[] = {RandomTensor({2, 3}, 1), RandomTensor({}, 2), RandomTensor({0, 4}, 3), RandomTensor({7}, 4)};
  CpuDevice device("/device:CPU:0", 1);
  auto r = RunGraphOnce(g, &device, {{"a", in[0]}, {"s", in[1]}, {"e", in[2]}, {"c", in[3]}},
                        {"pack", "unpack:0", "unpack:1", "unpack:2", "unpack:3"});
  ASSERT_TRUE(r.ok()) << r.status();
  const float* p = (*r)[0].data<float>();
  for (int i = 0; i < 4; ++i) {
    const Tensor& out = (*r)[i + 1];
    ASSERT_EQ(out.shape(), in[i].shape()) << i;
    for (int64_t k = 0; k < out.NumElements(); ++k) {
      EXPECT_EQ(out.data<float>()[k], in[i].data<float>()[k]) << i << "," << k;
      EXPECT_EQ(*p++, in[i].data<float>()[k]) << i << "," << k;
    }
  }
}

TEST(TransferKernelTest, BadAttributesAreErrorsNamingTheNode) {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {5}, "x");
  b.AddNode("UnpackTensors", {x}, UnpackAttrs({1, 1}, {2, 2}), "too_few");
  EXPECT_NE(b.status().message().find("4"), std::string::npos) << b.status();
  Graph g2;
  GraphBuilder b2(&g2);
  Output y = b2.Placeholder(DType::kFloat32, {5}, "y");
  b2.AddNode("UnpackTensors", {y}, UnpackAttrs({2}, {5}), "short_dims");
  EXPECT_NE(b2.status().message().find("short_dims"), std::string::npos) << b2.status();
  Graph g3;
  GraphBuilder b3(&g3);
  Output z = b3.Placeholder(DType::kFloat32, {5}, "z");
  AttrList attrs = UnpackAttrs({1}, {5});
  attrs[1] = Attr("num_outputs", int64_t{1} << 40);
  b3.AddNode("UnpackTensors", {z}, attrs, "huge");
  EXPECT_NE(b3.status().message().find("num_outputs"), std::string::npos) << b3.status();
}

TEST(TransferKernelTest, UnpackRefusesAPackedTensorOfAnotherSize) {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {-1}, "x");
  b.AddNode("UnpackTensors", {x}, UnpackAttrs({1, 1}, {2, 3}), "unpack");
  ASSERT_TRUE(b.status().ok()) << b.status();
  CpuDevice device("/device:CPU:0", 1);
  auto r = RunGraphOnce(g, &device, {{"x", RandomTensor({4}, 1)}}, {"unpack:0"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("expected float32[5]"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace weft
