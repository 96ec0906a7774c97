// PackTensors and UnpackTensors kernels.
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/ops/ops.h"
#include "graph/ops/transfer_shapes.h"
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
  // Each part from a 64-byte boundary (16 floats): a at 0, s at 16, e and c at 32.
  EXPECT_EQ(packed.shape(), TensorShape({32 + 7}));
  ASSERT_EQ(unpack->num_outputs(), 4);
  EXPECT_EQ(unpack->output_shape(2), TensorShape({0, 4}));

  const Tensor in[] = {RandomTensor({2, 3}, 1), RandomTensor({}, 2), RandomTensor({0, 4}, 3), RandomTensor({7}, 4)};
  CpuDevice device("/device:CPU:0", 1);
  auto r = RunGraphOnce(g, &device, {{"a", in[0]}, {"s", in[1]}, {"e", in[2]}, {"c", in[3]}},
                        {"pack", "unpack:0", "unpack:1", "unpack:2", "unpack:3"});
  ASSERT_TRUE(r.ok()) << r.status();
  const Tensor& pack = (*r)[0];
  const int64_t offsets[] = {0, 16, 32, 32};
  for (int i = 0; i < 4; ++i) {
    const Tensor& out = (*r)[i + 1];
    ASSERT_EQ(out.shape(), in[i].shape()) << i;
    for (int64_t k = 0; k < out.NumElements(); ++k) {
      EXPECT_EQ(out.data<float>()[k], in[i].data<float>()[k]) << i << "," << k;
      EXPECT_EQ(pack.data<float>()[offsets[i] + k], in[i].data<float>()[k]) << i << "," << k;
    }
    // Unpacking copies nothing: each output is a view of the packed tensor.
    EXPECT_TRUE(out.SharesBufferWith(pack)) << i;
    EXPECT_EQ(out.raw_data(), pack.data<float>() + offsets[i]) << i;
  }
  // The gaps are zeros, not whatever the buffer held before.
  for (int64_t k : {6, 10, 15, 17, 31}) EXPECT_EQ(pack.data<float>()[k], 0.0f) << k;
}

TEST(TransferKernelTest, PackedLayoutAlignsEveryPartAndChecksSizes) {
  std::vector<int64_t> offsets;
  auto total = PackedLayout({3, 0, 16, 1}, DType::kFloat32, &offsets);
  ASSERT_TRUE(total.ok()) << total.status();
  EXPECT_EQ(*total, 32 + 1);  // the empty part takes no room
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 16, 16, 32}));
  total = PackedLayout({1, 1}, DType::kFloat16, &offsets);  // 32 halves per boundary
  ASSERT_TRUE(total.ok());
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 32}));
  EXPECT_FALSE(PackedLayout({-1}, DType::kFloat32, &offsets).ok());
  EXPECT_FALSE(PackedLayout({int64_t{1} << 62, int64_t{1} << 62}, DType::kFloat32, &offsets).ok());
  EXPECT_FALSE(PackedLayout({1}, DType::kInvalid, &offsets).ok());
}

TEST(TransferKernelTest, BadAttributesAreErrorsNamingTheNode) {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {5}, "x");
  b.AddNode("UnpackTensors", {x}, UnpackAttrs({1, 1}, {2, 2}), "too_few");
  // Two and two floats take 18 elements packed (the second at 16).
  EXPECT_NE(b.status().message().find("18"), std::string::npos) << b.status();
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
  // Two floats at 0, three at 16: 19 elements packed.
  EXPECT_NE(r.status().message().find("expected float32[19]"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace weft
