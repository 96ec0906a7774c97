#include "worker/collective/reduce.h"

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace collective {
namespace {

// The bytes of `v`, cut at each of `cuts` (byte offsets, ascending).
template <typename T>
std::vector<absl::string_view> Cut(const std::vector<T>& v, const std::vector<size_t>& cuts) {
  const char* base = reinterpret_cast<const char*>(v.data());
  std::vector<absl::string_view> pieces;
  size_t begin = 0;
  for (size_t c : cuts) {
    pieces.emplace_back(base + begin, c - begin);
    begin = c;
  }
  pieces.emplace_back(base + begin, v.size() * sizeof(T) - begin);
  return pieces;
}

TEST(ReduceTest, SumsFloatsSplitInsideElements) {
  std::vector<float> dst(37), src(37);
  for (int i = 0; i < 37; ++i) {
    dst[i] = i;
    src[i] = 0.5f * i;
  }
  // Cuts inside elements, an empty piece, and a piece shorter than one element.
  SumInto(DType::kFloat32, dst.data(), dst.size() * 4, Cut(src, {3, 3, 5, 6, 41, 100}));
  for (int i = 0; i < 37; ++i) EXPECT_EQ(dst[i], 1.5f * i) << i;
}

TEST(ReduceTest, SumsInt64AndInt32) {
  std::vector<int64_t> d64 = {1, -2, 3, int64_t{1} << 40}, s64 = {10, 20, 30, 1};
  SumInto(DType::kInt64, d64.data(), 32, Cut(s64, {7, 15}));
  EXPECT_EQ(d64, (std::vector<int64_t>{11, 18, 33, (int64_t{1} << 40) + 1}));
  std::vector<int32_t> d32 = {1, 2, 3}, s32 = {-1, -2, 5};
  SumInto(DType::kInt32, d32.data(), 12, Cut(s32, {1}));
  EXPECT_EQ(d32, (std::vector<int32_t>{0, 0, 8}));
}

TEST(ReduceTest, SumsFloat16InFloat32AndRoundsToNearestEven) {
  // 21 elements: two vector blocks of 8 and a scalar tail, cut inside elements.
  std::vector<Half> dst, src;
  std::vector<float> want;
  for (int i = 0; i < 21; ++i) {
    const float a = 0.25f * i - 2.0f, b = i % 3 == 0 ? 1000.5f : -0.125f * i;
    dst.push_back(Half(a));
    src.push_back(Half(b));
    want.push_back(static_cast<float>(Half(static_cast<float>(Half(a)) + static_cast<float>(Half(b)))));
  }
  // 2048 + 1 rounds to even (2048) in float16; 65504 + 32 overflows to inf.
  dst.push_back(Half(2048.0f));
  src.push_back(Half(1.0f));
  want.push_back(2048.0f);
  dst.push_back(Half(65504.0f));
  src.push_back(Half(32.0f));
  want.push_back(std::numeric_limits<float>::infinity());
  SumInto(DType::kFloat16, dst.data(), dst.size() * 2, Cut(src, {1, 1, 17, 30}));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(static_cast<float>(dst[i]), want[i]) << i;
  EXPECT_TRUE(CheckReducibleDType(DType::kFloat16).ok());
}

TEST(ReduceTest, CopiesPieces) {
  std::vector<int32_t> dst(5, 0), src = {5, 6, 7, 8, 9};
  CopyInto(dst.data(), 20, Cut(src, {2, 9, 9}));
  EXPECT_EQ(dst, src);
}

TEST(ReduceTest, RejectsTypesItCannotSum) {
  EXPECT_TRUE(CheckReducibleDType(DType::kFloat32).ok());
  absl::Status s = CheckReducibleDType(DType::kBool);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bool"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace collective
}  // namespace weft
