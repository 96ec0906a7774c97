#include "common/tensor.h"

#include <cstdint>
#include <new>
#include <string>

#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(TensorShapeTest, ElementsAndCompatibility) {
  TensorShape s{64, 784};
  EXPECT_EQ(s.num_elements(), 64 * 784);
  EXPECT_TRUE(s.IsFullyDefined());
  TensorShape u{-1, 784};
  EXPECT_EQ(u.num_elements(), -1);
  EXPECT_TRUE(u.IsCompatibleWith(s));
  EXPECT_FALSE(u.IsCompatibleWith(TensorShape{64, 10}));
  EXPECT_EQ(u.DebugString(), "[?,784]");
  EXPECT_EQ(TensorShape{}.num_elements(), 1);
}

TEST(TensorTest, BuffersAreAlignedAndShared) {
  Tensor a(DType::kFloat32, {3, 5});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.raw_data()) % kTensorAlignment, 0u);
  EXPECT_TRUE(a.RefCountIsOne());
  Tensor b = a;
  EXPECT_TRUE(b.SharesBufferWith(a));
  EXPECT_FALSE(a.RefCountIsOne());
  a.data<float>()[4] = 2.5f;
  EXPECT_EQ(b.data<float>()[4], 2.5f);
  Tensor c = a.DeepCopy();
  EXPECT_FALSE(c.SharesBufferWith(a));
  EXPECT_EQ(c.data<float>()[4], 2.5f);
  b = Tensor();
  EXPECT_TRUE(a.RefCountIsOne());
}

TEST(TensorTest, ViewsShareTheBufferAndStayInsideIt) {
  Tensor a(DType::kFloat32, {64});
  for (int i = 0; i < 64; ++i) a.data<float>()[i] = static_cast<float>(i);
  auto v = a.View(DType::kFloat32, {2, 3}, 16 * sizeof(float));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->SharesBufferWith(a));
  EXPECT_EQ(v->data<float>()[0], 16.0f);
  EXPECT_EQ(v->data<float>()[5], 21.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v->raw_data()) % kTensorAlignment, 0u);
  // Copies, moves and reshapes keep the offset; a view of a view adds up.
  Tensor copy = *v;
  Tensor moved = std::move(copy);
  EXPECT_EQ(moved.data<float>()[1], 17.0f);
  auto flat = moved.Reshaped({6});
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->data<float>()[2], 18.0f);
  auto inner = a.View(DType::kFloat32, {48}, 16 * sizeof(float))->View(DType::kInt32, {1}, 32 * sizeof(float));
  ASSERT_TRUE(inner.ok()) << inner.status();
  EXPECT_EQ(inner->raw_data(), a.data<float>() + 48);
  // The buffer outlives the tensor it came from.
  a = Tensor();
  EXPECT_EQ(v->data<float>()[3], 19.0f);
}

TEST(TensorTest, ViewsThatWouldLeaveTheirTensorAreRefused) {
  Tensor a(DType::kFloat32, {32});
  auto expect_refused = [&](absl::StatusOr<Tensor> v, const std::string& why) {
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << why;
    EXPECT_NE(v.status().message().find(why), std::string::npos) << v.status();
  };
  expect_refused(a.View(DType::kFloat32, {17}, 64), "reach past the end");
  expect_refused(a.View(DType::kFloat32, {1}, 256), "reach past the end");
  expect_refused(a.View(DType::kFloat32, {1}, 4), "not a multiple of 64");
  expect_refused(a.View(DType::kFloat32, {int64_t{1} << 62, 8}, 0), "float32");
  expect_refused(Tensor().View(DType::kFloat32, {1}, 0), "of no tensor");
  EXPECT_TRUE(a.View(DType::kFloat32, {16}, 64).ok());  // exactly to the end
  EXPECT_TRUE(a.View(DType::kFloat32, {0}, 128).ok());  // empty, at the end
}

TEST(TensorTest, ReshapeKeepsBufferAndChecksCount) {
  Tensor a(DType::kInt32, {2, 6});
  auto r = a.Reshaped({3, 4});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->SharesBufferWith(a));
  EXPECT_FALSE(a.Reshaped({5}).ok());
}

TEST(TensorShapeTest, NumElementsIsMinusOneInsteadOfWrapping) {
  // 4611686018427387905 * 4 = 2^64 + 4, which a wrapping product reports as 4.
  EXPECT_EQ((TensorShape{4611686018427387905, 4}).num_elements(), -1);
  EXPECT_EQ((TensorShape{int64_t{1} << 62, 2}).num_elements(), -1);
  EXPECT_EQ((TensorShape{int64_t{1} << 62, 1}).num_elements(), int64_t{1} << 62);
  // A zero anywhere, even after an overflowing prefix, is zero elements.
  EXPECT_EQ((TensorShape{int64_t{1} << 62, 4, 0}).num_elements(), 0);
}

TEST(TensorTest, AllocateRefusesSizesThatOverflowOrExceedMemory) {
  auto wraps = Tensor::Allocate(DType::kFloat32, {4611686018427387905, 4});
  ASSERT_FALSE(wraps.ok());
  EXPECT_EQ(wraps.status().code(), absl::StatusCode::kInvalidArgument) << wraps.status();
  EXPECT_NE(wraps.status().message().find("float32[4611686018427387905,4]"), std::string::npos) << wraps.status();

  // 2^62 floats: the element count fits, the byte count does not.
  auto bytes = Tensor::Allocate(DType::kFloat32, {int64_t{1} << 62});
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument) << bytes.status();

  auto huge = Tensor::Allocate(DType::kFloat32, {int64_t{1} << 40, 1});
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_NE(huge.status().message().find("4398046511104 bytes"), std::string::npos) << huge.status();

  auto unknown = Tensor::Allocate(DType::kFloat32, {-1, 3});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument) << unknown.status();

  auto empty = Tensor::Allocate(DType::kFloat32, {0, int64_t{1} << 62});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->NumElements(), 0);
}

// Throws as an allocator out of memory does (operator new's contract).
class ExhaustedAllocator final : public Allocator {
 public:
  Buffer* Allocate(size_t) override { throw std::bad_alloc(); }
  Stats GetStats() const override { return Stats(); }

 protected:
  void Release(Buffer*) override {}
};

TEST(TensorTest, AllocateTurnsTheAllocatorsExceptionIntoResourceExhausted) {
  ExhaustedAllocator exhausted;
  auto t = Tensor::Allocate(DType::kInt32, {3, 5}, &exhausted);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted) << t.status();
  EXPECT_NE(t.status().message().find("int32[3,5] (60 bytes)"), std::string::npos) << t.status();

  Tensor a(DType::kInt32, {3, 5});
  auto copy = a.TryDeepCopy(&exhausted);
  ASSERT_FALSE(copy.ok());
  EXPECT_EQ(copy.status().code(), absl::StatusCode::kResourceExhausted) << copy.status();
  auto good = a.TryDeepCopy();
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_FALSE(good->SharesBufferWith(a));
}

TEST(TensorTest, ReshapedRefusesAShapeWhoseCountWrapsToTheSame) {
  Tensor a(DType::kFloat32, {4});
  EXPECT_FALSE(a.Reshaped({4611686018427387905, 4}).ok());
}

TEST(CachingAllocatorTest, ReusesReleasedBlocks) {
  CachingAllocator alloc;
  for (int step = 0; step < 10; ++step) {
    Tensor x(DType::kFloat32, {64, 784}, &alloc);
    Tensor y(DType::kFloat32, {64, 256}, &alloc);
  }
  const auto stats = alloc.GetStats();
  EXPECT_EQ(stats.system_allocs, 2);
  EXPECT_EQ(stats.cache_hits, 18);
  EXPECT_EQ(stats.bytes_in_use, 0);
}

TEST(CachingAllocatorTest, SizeClassesBoundSlack) {
  for (size_t n : {1ul, 255ul, 257ul, 1000ul, 4097ul, 200000ul, 64ul << 20}) {
    const size_t c = CachingAllocator::SizeClass(n);
    EXPECT_GE(c, n);
    EXPECT_LE(c, std::max<size_t>(256, n + n / 4 + 1)) << n;
  }
}

TEST(CachingAllocatorTest, CacheLimitFreesExtraBlocks) {
  CachingAllocator alloc(/*max_cached_bytes=*/4096);
  {
    Tensor a(DType::kFloat32, {1024}, &alloc);  // 4096 bytes
    Tensor b(DType::kFloat32, {1024}, &alloc);
  }
  EXPECT_EQ(alloc.GetStats().bytes_cached, 4096);
}

TEST(HalfTest, ConvertsExactlyAndRounds) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f}) {
    EXPECT_EQ(static_cast<float>(Half(f)), f) << f;
  }
  EXPECT_EQ(static_cast<float>(Half(1.0f + 1.0f / 4096)), 1.0f);  // rounds to even
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(1e6f))));
}

}  // namespace
}  // namespace weft
