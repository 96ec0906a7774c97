#include "common/allocator.h"

#include <new>

#include "common/tensor.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(CachingAllocatorLimitTest, RefusesPastTheLimitAndServesAgainOnceMemoryIsBack) {
  CachingAllocator allocator;
  allocator.SetLimit(size_t{3} << 20);
  Buffer* a = allocator.Allocate(size_t{2} << 20);
  EXPECT_THROW(allocator.Allocate(size_t{2} << 20), std::bad_alloc);
  EXPECT_EQ(allocator.GetStats().bytes_in_use, int64_t{2} << 20);
  // Through Tensor::Allocate the same refusal is a status, not an exception.
  absl::StatusOr<Tensor> t = Tensor::Allocate(DType::kFloat32, TensorShape({512 * 1024}), &allocator);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted) << t.status();
  a->Unref();
  Buffer* b = allocator.Allocate(size_t{2} << 20);  // served from the cache
  EXPECT_EQ(allocator.GetStats().cache_hits, 1);
  b->Unref();
}

TEST(CachingAllocatorLimitTest, CachedBlocksAreFreedToMakeRoom) {
  CachingAllocator allocator;
  allocator.SetLimit(size_t{3} << 20);
  allocator.Allocate(size_t{2} << 20)->Unref();  // 2 MiB now cached
  EXPECT_EQ(allocator.GetStats().bytes_cached, int64_t{2} << 20);
  // A different size class: fits only if the cached block is given back.
  Buffer* b = allocator.Allocate(size_t{5} << 19);
  EXPECT_EQ(allocator.GetStats().bytes_cached, 0);
  EXPECT_EQ(allocator.GetStats().bytes_in_use, int64_t{5} << 19);
  b->Unref();
}

TEST(CachingAllocatorLimitTest, NoLimitByDefault) {
  CachingAllocator allocator;
  EXPECT_EQ(allocator.limit(), 0u);
  Buffer* a = allocator.Allocate(size_t{8} << 20);
  Buffer* b = allocator.Allocate(size_t{8} << 20);
  a->Unref();
  b->Unref();
}

}  // namespace
}  // namespace weft
