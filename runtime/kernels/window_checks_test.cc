// The window ops' shared geometry: output sizes, TensorFlow's SAME padding
// split into before and after, and the errors both devices report.
#include "runtime/kernels/window_checks.h"

#include <string>

#include "gtest/gtest.h"

namespace weft {
namespace kernels {
namespace {

Tensor Shaped(const TensorShape& s) { return Tensor(DType::kFloat32, s); }

ConvParams Conv(int64_t stride, Padding padding) { return ConvParams{stride, padding}; }

void ExpectError(const absl::Status& s, const std::string& substring) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(substring), std::string::npos) << s;
}

TEST(ConvGeometryTest, ValidPadsNothing) {
  auto g = ComputeConvGeometry(Shaped({2, 5, 6, 3}), Shaped({3, 2, 3, 4}), Conv(1, Padding::kValid));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->OutputShape(), TensorShape({2, 3, 5, 4}));
  EXPECT_EQ(g->k(), 3 * 2 * 3);
  EXPECT_EQ(g->patches(), 15);
  EXPECT_EQ(g->pad_top + g->pad_bottom + g->pad_left + g->pad_right, 0);
  EXPECT_TRUE(g->HasSymmetricPadding());
  EXPECT_FALSE(g->IsPointwise());
}

TEST(ConvGeometryTest, SameSplitsOddPaddingWithTheLargerHalfAfter) {
  // 3x3, stride 1 on 8x8: one row and column on each side.
  auto sym = ComputeConvGeometry(Shaped({1, 8, 8, 2}), Shaped({3, 3, 2, 5}), Conv(1, Padding::kSame));
  ASSERT_TRUE(sym.ok()) << sym.status();
  EXPECT_EQ(sym->OutputShape(), TensorShape({1, 8, 8, 5}));
  EXPECT_EQ(sym->pad_top, 1);
  EXPECT_EQ(sym->pad_bottom, 1);
  EXPECT_TRUE(sym->HasSymmetricPadding());
  // 3x3, stride 2 on 8x8: out 4, total padding 3 * 2 + 3 - 8 = 1, after.
  auto asym = ComputeConvGeometry(Shaped({1, 8, 8, 2}), Shaped({3, 3, 2, 5}), Conv(2, Padding::kSame));
  ASSERT_TRUE(asym.ok()) << asym.status();
  EXPECT_EQ(asym->OutputShape(), TensorShape({1, 4, 4, 5}));
  EXPECT_EQ(asym->pad_top, 0);
  EXPECT_EQ(asym->pad_bottom, 1);
  EXPECT_EQ(asym->pad_left, 0);
  EXPECT_EQ(asym->pad_right, 1);
  EXPECT_FALSE(asym->HasSymmetricPadding());
  // 2x3 on 4x5, stride 1: rows pad (0, 1), columns (1, 1).
  auto mixed = ComputeConvGeometry(Shaped({2, 4, 5, 3}), Shaped({2, 3, 3, 2}), Conv(1, Padding::kSame));
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ(mixed->pad_top, 0);
  EXPECT_EQ(mixed->pad_bottom, 1);
  EXPECT_EQ(mixed->pad_left, 1);
  EXPECT_EQ(mixed->pad_right, 1);
  EXPECT_FALSE(mixed->HasSymmetricPadding());
}

TEST(ConvGeometryTest, OneByOne) {
  auto pointwise = ComputeConvGeometry(Shaped({3, 8, 8, 4}), Shaped({1, 1, 4, 5}), Conv(1, Padding::kSame));
  ASSERT_TRUE(pointwise.ok()) << pointwise.status();
  EXPECT_TRUE(pointwise->IsPointwise());
  // Stride 2 on 9: out 5, (5 - 1) * 2 + 1 - 9 = 0, so no padding at all.
  auto strided = ComputeConvGeometry(Shaped({2, 9, 9, 3}), Shaped({1, 1, 3, 4}), Conv(2, Padding::kSame));
  ASSERT_TRUE(strided.ok()) << strided.status();
  EXPECT_FALSE(strided->IsPointwise());
  EXPECT_EQ(strided->OutputShape(), TensorShape({2, 5, 5, 4}));
  EXPECT_EQ(strided->pad_top + strided->pad_bottom, 0);
}

TEST(ConvGeometryTest, BadInputsNameTheOperand) {
  const ConvParams valid = Conv(1, Padding::kValid);
  ExpectError(ComputeConvGeometry(Shaped({5, 5, 3}), Shaped({3, 3, 3, 4}), valid).status(),
              "x must have rank 4 (NHWC), got [5,5,3]");
  ExpectError(ComputeConvGeometry(Shaped({1, 5, 5, 3}), Shaped({3, 3, 3}), valid).status(),
              "filter must have rank 4 (HWIO), got [3,3,3]");
  ExpectError(ComputeConvGeometry(Shaped({1, 5, 5, 3}), Shaped({3, 3, 2, 4}), valid).status(),
              "x [1,5,5,3] has 3 channels but filter [3,3,2,4] expects 2");
  ExpectError(ComputeConvGeometry(Shaped({1, 5, 5, 3}), Shaped({0, 3, 3, 4}), valid).status(),
              "filter [0,3,3,4] has an empty window");
  ExpectError(ComputeConvGeometry(Shaped({1, 2, 5, 3}), Shaped({3, 3, 3, 4}), valid).status(),
              "input height 2 is smaller than the window size 3 with VALID padding");
  auto g = ComputeConvGeometry(Shaped({1, 5, 5, 3}), Shaped({3, 3, 3, 4}), valid);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(CheckConvGradient(*g, Shaped({1, 3, 3, 4})).ok());
  ExpectError(CheckConvGradient(*g, Shaped({1, 3, 3, 5})),
              "gradient [1,3,3,5] does not match the convolution's output [1,3,3,4]");
}

TEST(PoolGeometryTest, SameWindowsAreClippedToTheInput) {
  // ksize 3, stride 2 on 6: out 3, total padding 2 * 2 + 3 - 6 = 1, after.
  auto g = ComputePoolGeometry(Shaped({2, 6, 6, 3}), PoolParams{3, 2, Padding::kSame});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->OutputShape(), TensorShape({2, 3, 3, 3}));
  EXPECT_EQ(g->pad_top, 0);
  EXPECT_EQ(g->pad_bottom, 1);
  EXPECT_FALSE(g->HasSymmetricPadding());
  int64_t i0, i1, j0, j1;
  g->Window(2, 0, &i0, &i1, &j0, &j1);
  EXPECT_EQ(i0, 4);
  EXPECT_EQ(i1, 6);  // row 6 is padding
  EXPECT_EQ(j0, 0);
  EXPECT_EQ(j1, 3);
  // ksize 3, stride 1 on 5: one on each side.
  auto sym = ComputePoolGeometry(Shaped({1, 5, 5, 1}), PoolParams{3, 1, Padding::kSame});
  ASSERT_TRUE(sym.ok()) << sym.status();
  EXPECT_TRUE(sym->HasSymmetricPadding());
  sym->Window(0, 0, &i0, &i1, &j0, &j1);
  EXPECT_EQ(i0, 0);
  EXPECT_EQ(i1, 2);
}

TEST(PoolGeometryTest, BadInputsNameTheOperand) {
  const PoolParams p{2, 2, Padding::kValid};
  ExpectError(ComputePoolGeometry(Shaped({4, 4, 2}), p).status(), "x must have rank 4 (NHWC), got [4,4,2]");
  ExpectError(ComputePoolGeometry(Shaped({1, 1, 4, 2}), p).status(),
              "input height 1 is smaller than the window size 2 with VALID padding");
  auto g = ComputePoolGeometry(Shaped({1, 4, 4, 2}), p);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(CheckPoolGradInputs(*g, Shaped({1, 2, 2, 2}), Shaped({1, 2, 2, 2})).ok());
  ExpectError(CheckPoolGradInputs(*g, Shaped({1, 2, 3, 2}), Shaped({1, 2, 2, 2})),
              "y [1,2,3,2] does not match the pooling output [1,2,2,2]");
  ExpectError(CheckPoolGradInputs(*g, Shaped({1, 2, 2, 2}), Shaped({1, 2, 3, 2})),
              "gradient [1,2,3,2] does not match the pooling output [1,2,2,2]");
}

}  // namespace
}  // namespace kernels
}  // namespace weft
