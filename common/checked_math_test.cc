#include "common/checked_math.h"

#include <cstdint>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::testing::HasSubstr;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(CheckedMathTest, AddMulSubReportOverflow) {
  int64_t out;
  EXPECT_TRUE(CheckedAdd<int64_t>(kMax - 1, 1, &out));
  EXPECT_EQ(out, kMax);
  EXPECT_FALSE(CheckedAdd<int64_t>(kMax, 1, &out));
  EXPECT_FALSE(CheckedMul<int64_t>(int64_t{1} << 32, int64_t{1} << 31, &out));
  EXPECT_TRUE(CheckedMul<int64_t>(int64_t{1} << 31, int64_t{1} << 31, &out));
  EXPECT_EQ(out, int64_t{1} << 62);
  EXPECT_FALSE(CheckedSub<int64_t>(std::numeric_limits<int64_t>::min(), 1, &out));
  size_t s;
  EXPECT_FALSE(CheckedMul<size_t>(size_t{1} << 63, 2, &s));
}

TEST(CheckedMathTest, NumElementsRejectsOverflowAndNegatives) {
  EXPECT_EQ(*CheckedNumElements({}, "x"), 1);
  EXPECT_EQ(*CheckedNumElements({4, 0, 7}, "x"), 0);
  EXPECT_EQ(*CheckedNumElements({64, 784}, "x"), 64 * 784);
  // The Reshape target: [4611686018427387905, 4] wraps to 4.
  auto wrapped = CheckedNumElements({4611686018427387905, 4}, "node 'r' attr shape");
  ASSERT_FALSE(wrapped.ok());
  EXPECT_THAT(wrapped.status().message(), HasSubstr("node 'r' attr shape"));
  EXPECT_THAT(wrapped.status().message(), HasSubstr("dimension 1"));
  auto negative = CheckedNumElements({3, -1}, "feed 'x'");
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(negative.status().message(), HasSubstr("dimension 1 is -1"));
}

TEST(CheckedMathTest, ByteSizeRejectsWrapToSmall) {
  EXPECT_EQ(*CheckedByteSize(10, 4, "t"), 40u);
  // 2^62 float32 elements is 2^64 bytes, which wraps to 0 in size_t.
  EXPECT_FALSE(CheckedByteSize(int64_t{1} << 62, 4, "t").ok());
  EXPECT_FALSE(CheckedByteSize(-1, 4, "t").ok());
}

TEST(CheckedMathTest, RangeWithinDoesNotWrap) {
  EXPECT_TRUE(RangeWithin(0, 4, 4));
  EXPECT_TRUE(RangeWithin(4, 0, 4));
  EXPECT_FALSE(RangeWithin(1, 4, 4));
  // begin + size wraps negative and would pass a naive `begin + size <= dim`.
  EXPECT_FALSE(RangeWithin(kMax - 1, 4, 4));
  EXPECT_FALSE(RangeWithin(-1, 1, 4));
  EXPECT_FALSE(RangeWithin(0, -1, 4));
}

TEST(CheckedMathTest, DivideRejectsZero) {
  EXPECT_EQ(*CheckedDivide(12, 4, "d"), 3);
  auto zero = CheckedDivide(12, 0, "Variable 'v' init rows");
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(zero.status().message(), HasSubstr("Variable 'v' init rows"));
}

}  // namespace
}  // namespace weft
