// AvgPool (+Grad) and Concat (+Grad) on the CPU against values worked out by
// hand: VALID windows, uneven SAME padding whose edge windows average fewer
// positions, the join of matrices and images and its split; and the
// refusals of bad input by the shape functions and by the kernels. (The
// gradients as a whole: gradient_check_test.)
#include <string>
#include <vector>

#include "graph/builder.h"
#include "gtest/gtest.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace {

using testing::FloatTensor;
using testing::IntTensor;
using testing::RunGraph;
using testing::StatusHas;

AttrList PoolAttrs(int64_t k, int64_t stride, const std::string& padding) {
  return {Attr("ksize", k), Attr("stride", stride), Attr("padding", padding)};
}

// Runs the one node `op` on constant `inputs` and returns its outputs.
absl::StatusOr<std::vector<Tensor>> RunOp(const std::string& op, const std::vector<Tensor>& inputs,
                                          const AttrList& attrs, int num_outputs = 1) {
  Graph g;
  GraphBuilder b(&g);
  std::vector<Output> in;
  for (size_t i = 0; i < inputs.size(); ++i) in.push_back(b.Const(inputs[i], "in" + std::to_string(i)));
  b.AddNode(op, in, attrs, "op");
  if (!b.status().ok()) return b.status();
  std::vector<std::string> fetches;
  for (int i = 0; i < num_outputs; ++i) fetches.push_back("op:" + std::to_string(i));
  std::vector<Tensor> out;
  absl::Status s = RunGraph(g, {}, fetches, &out);
  if (!s.ok()) return s;
  return out;
}

void ExpectValues(const Tensor& t, const TensorShape& shape, const std::vector<float>& want) {
  ASSERT_EQ(t.shape(), shape);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(t.data<float>()[i], want[i]) << "element " << i;
}

TEST(AvgPoolKernelTest, ValidWindowsAverageTheirPositions) {
  // 4 x 4, one channel: 0..15.
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = static_cast<float>(i);
  auto out = RunOp("AvgPool", {FloatTensor({1, 4, 4, 1}, v)}, PoolAttrs(2, 2, "VALID"));
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectValues((*out)[0], {1, 2, 2, 1}, {2.5f, 4.5f, 10.5f, 12.5f});
}

TEST(AvgPoolKernelTest, SamePaddingIsNotCounted) {
  // 3 x 3 with 2 x 2 windows at stride 2: one padded row and column after,
  // so the edge windows hold 2, 2 and 1 positions. Two channels.
  std::vector<float> v;
  for (int i = 0; i < 9; ++i) {
    v.push_back(static_cast<float>(i + 1));
    v.push_back(-10.0f * (i + 1));
  }
  auto out = RunOp("AvgPool", {FloatTensor({1, 3, 3, 2}, v)}, PoolAttrs(2, 2, "SAME"));
  ASSERT_TRUE(out.ok()) << out.status();
  // Channel 0 windows: {1,2,4,5}, {3,6}, {7,8}, {9}.
  ExpectValues((*out)[0], {1, 2, 2, 2}, {3.0f, -30.0f, 4.5f, -45.0f, 7.5f, -75.0f, 9.0f, -90.0f});
}

TEST(AvgPoolKernelTest, GradSpreadsEachWindowOverItsPositions) {
  // The SAME case above with a gradient of 1 per window: each position gets
  // 1 / (its window's size).
  auto out = RunOp("AvgPoolGrad", {Tensor(DType::kFloat32, {1, 3, 3, 1}), FloatTensor({1, 2, 2, 1}, {1, 1, 1, 1})},
                   PoolAttrs(2, 2, "SAME"));
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectValues((*out)[0], {1, 3, 3, 1}, {0.25f, 0.25f, 0.5f, 0.25f, 0.25f, 0.5f, 0.5f, 0.5f, 1.0f});
  // Overlapping windows (3 x 3 at stride 1, VALID on 4 x 1... 4 x 4): the
  // centre positions sum the shares of every window covering them.
  auto overlap = RunOp("AvgPoolGrad", {Tensor(DType::kFloat32, {1, 4, 4, 1}), FloatTensor({1, 2, 2, 1}, {9, 9, 9, 9})},
                       PoolAttrs(3, 1, "VALID"));
  ASSERT_TRUE(overlap.ok()) << overlap.status();
  ExpectValues((*overlap)[0], {1, 4, 4, 1}, {1, 2, 2, 1, 2, 4, 4, 2, 2, 4, 4, 2, 1, 2, 2, 1});
}

TEST(AvgPoolKernelTest, RefusesBadInput) {
  auto small = RunOp("AvgPool", {FloatTensor({1, 1, 4, 1}, {1, 2, 3, 4})}, PoolAttrs(2, 2, "VALID"));
  EXPECT_TRUE(StatusHas(small.status(), "smaller than the window size")) << small.status();
  auto rank = RunOp("AvgPool", {FloatTensor({4, 1}, {1, 2, 3, 4})}, PoolAttrs(2, 2, "VALID"));
  EXPECT_TRUE(StatusHas(rank.status(), "rank 4")) << rank.status();
  auto grad = RunOp("AvgPoolGrad", {Tensor(DType::kFloat32, {1, 4, 4, 1}), FloatTensor({1, 1, 2, 1}, {1, 2})},
                    PoolAttrs(2, 2, "VALID"));
  EXPECT_TRUE(StatusHas(grad.status(), "does not match the pooling output")) << grad.status();
}

TEST(ConcatKernelTest, JoinsAlongTheLastAxis) {
  auto m = RunOp("Concat", {FloatTensor({2, 1}, {1, 2}), FloatTensor({2, 3}, {3, 4, 5, 6, 7, 8})}, {});
  ASSERT_TRUE(m.ok()) << m.status();
  ExpectValues((*m)[0], {2, 4}, {1, 3, 4, 5, 2, 6, 7, 8});
  // Images: per position, the channels of each input in turn; an empty
  // input adds nothing.
  auto img = RunOp("Concat",
                   {FloatTensor({1, 1, 2, 2}, {1, 2, 3, 4}), Tensor(DType::kFloat32, {1, 1, 2, 0}),
                    FloatTensor({1, 1, 2, 1}, {9, 8})},
                   {});
  ASSERT_TRUE(img.ok()) << img.status();
  ExpectValues((*img)[0], {1, 1, 2, 3}, {1, 2, 9, 3, 4, 8});
}

TEST(ConcatKernelTest, GradSplitsTheLastAxis) {
  auto out = RunOp("ConcatGrad",
                   {FloatTensor({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}), Tensor(DType::kFloat32, {2, 1}),
                    Tensor(DType::kFloat32, {2, 3})},
                   {Attr("num_split", int64_t{2})}, 2);
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectValues((*out)[0], {2, 1}, {1, 5});
  ExpectValues((*out)[1], {2, 3}, {2, 3, 4, 6, 7, 8});
}

TEST(ConcatKernelTest, RefusesInputsThatDifferElsewhere) {
  auto rows = RunOp("Concat", {FloatTensor({2, 1}, {1, 2}), FloatTensor({3, 1}, {1, 2, 3})}, {});
  EXPECT_TRUE(StatusHas(rows.status(), "input 1 [3,1] differs from input 0 [2,1] in dim 0")) << rows.status();
  auto rank = RunOp("Concat", {FloatTensor({2, 1}, {1, 2}), FloatTensor({2}, {1, 2})}, {});
  EXPECT_TRUE(StatusHas(rank.status(), "rank")) << rank.status();
  auto ints = RunOp("Concat", {FloatTensor({2}, {1, 2}), IntTensor({2}, {1, 2})}, {});
  EXPECT_TRUE(StatusHas(ints.status(), "input 1 must be float32")) << ints.status();
  auto grad = RunOp("ConcatGrad", {FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6}), Tensor(DType::kFloat32, {2, 1})},
                    {Attr("num_split", int64_t{1})});
  EXPECT_TRUE(StatusHas(grad.status(), "does not match the concatenation")) << grad.status();
  auto count = RunOp("ConcatGrad", {FloatTensor({2, 1}, {1, 2}), Tensor(DType::kFloat32, {2, 1})},
                     {Attr("num_split", int64_t{2})}, 2);
  EXPECT_TRUE(StatusHas(count.status(), "num_split")) << count.status();
}

}  // namespace
}  // namespace weft
