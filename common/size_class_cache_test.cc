// The size-class bookkeeping both caching allocators share: the classes a
// request rounds to, reuse within a class only, the cache's ceiling, the
// counters, and eviction handing blocks back to their owner.
#include "common/size_class_cache.h"

#include <cstddef>
#include <vector>

#include "common/allocator.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

// The smallest owner of a SizeClassCache: fresh host blocks on a miss,
// released blocks filed in the cache, refused ones freed and counted.
class OwnerForTest final : public Allocator {
 public:
  explicit OwnerForTest(size_t max_cached_bytes) : cache(max_cached_bytes) {}
  ~OwnerForTest() override {
    std::vector<Buffer*> blocks;
    cache.TakeAll(&blocks);
    Free(blocks);
  }

  Buffer* Allocate(size_t bytes) override {
    const size_t cls = SizeClassCache::SizeClass(bytes);
    if (Buffer* b = cache.Take(cls)) return b;
    cache.CountSystemAlloc(cls);
    return NewBlock(this, cls);
  }
  Stats GetStats() const override { return cache.stats(); }
  void Free(const std::vector<Buffer*>& blocks) {
    for (Buffer* b : blocks) DeleteBlock(b);
  }

  SizeClassCache cache;
  int refused = 0;

 protected:
  void Release(Buffer* buffer) override {
    cache.CountRelease(buffer->capacity());
    if (cache.Put(buffer)) return;
    ++refused;
    DeleteBlock(buffer);
  }
};

TEST(SizeClassCacheTest, RoundsToFourClassesPerPowerOfTwo) {
  EXPECT_EQ(SizeClassCache::SizeClass(0), 256u);
  EXPECT_EQ(SizeClassCache::SizeClass(256), 256u);
  EXPECT_EQ(SizeClassCache::SizeClass(257), 320u);  // 5/8 of 512
  EXPECT_EQ(SizeClassCache::SizeClass(449), 512u);
  EXPECT_EQ(SizeClassCache::SizeClass(1025), 1280u);  // 5/8 of 2048
  EXPECT_EQ(SizeClassCache::SizeClass(size_t{3} << 20), size_t{3} << 20);
  // The allocators' public name for it is the same function.
  EXPECT_EQ(CachingAllocator::SizeClass(1025), SizeClassCache::SizeClass(1025));
}

TEST(SizeClassCacheTest, ReusesAReleasedBlockOfTheSameClassOnly) {
  OwnerForTest owner(size_t{1} << 20);
  Buffer* a = owner.Allocate(300);
  void* const data = a->data();
  a->Unref();
  AllocatorStats s = owner.GetStats();
  EXPECT_EQ(s.bytes_cached, 320);
  EXPECT_EQ(s.bytes_in_use, 0);

  EXPECT_EQ(owner.cache.Take(SizeClassCache::SizeClass(1000)), nullptr);  // another class
  Buffer* b = owner.Allocate(310);                                        // same class: reused
  EXPECT_EQ(b->data(), data);
  EXPECT_TRUE(b->RefCountIsOne());
  s = owner.GetStats();
  EXPECT_EQ(s.system_allocs, 1);
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.bytes_in_use, 320);
  EXPECT_EQ(s.bytes_cached, 0);
  EXPECT_EQ(s.peak_bytes_in_use, 320);
  b->Unref();
}

TEST(SizeClassCacheTest, RefusesToCachePastItsCeiling) {
  OwnerForTest owner(300);
  Buffer* a = owner.Allocate(256);
  Buffer* b = owner.Allocate(256);
  EXPECT_EQ(owner.GetStats().peak_bytes_in_use, 512);
  a->Unref();
  b->Unref();  // 256 + 256 > 300: freed by the owner
  EXPECT_EQ(owner.refused, 1);
  EXPECT_EQ(owner.GetStats().bytes_cached, 256);
  EXPECT_EQ(owner.GetStats().bytes_in_use, 0);
}

TEST(SizeClassCacheTest, EvictGivesBackAtLeastWhatWasAskedAndNoMoreThanIsCached) {
  OwnerForTest owner(size_t{1} << 20);
  std::vector<Buffer*> live;
  for (int i = 0; i < 3; ++i) live.push_back(owner.Allocate(256));
  live.push_back(owner.Allocate(1024));
  for (Buffer* b : live) b->Unref();
  ASSERT_EQ(owner.GetStats().bytes_cached, 3 * 256 + 1024);

  std::vector<Buffer*> evicted;
  const size_t moved = owner.cache.Evict(300, &evicted);
  EXPECT_GE(moved, 300u);
  size_t sum = 0;
  for (Buffer* b : evicted) sum += b->capacity();
  EXPECT_EQ(sum, moved);
  EXPECT_EQ(owner.GetStats().bytes_cached, static_cast<int64_t>(3 * 256 + 1024 - moved));

  std::vector<Buffer*> rest;
  const size_t remaining = static_cast<size_t>(owner.GetStats().bytes_cached);
  EXPECT_EQ(owner.cache.Evict(size_t{1} << 30, &rest), remaining);
  EXPECT_EQ(owner.GetStats().bytes_cached, 0);
  owner.Free(evicted);
  owner.Free(rest);
}

TEST(SizeClassCacheTest, TakeAllEmptiesTheCache) {
  OwnerForTest owner(size_t{1} << 20);
  owner.Allocate(256)->Unref();
  owner.Allocate(2000)->Unref();
  std::vector<Buffer*> all;
  EXPECT_EQ(owner.cache.TakeAll(&all), 256u + 2048u);
  EXPECT_EQ(all.size(), 2u);
  EXPECT_EQ(owner.GetStats().bytes_cached, 0);
  EXPECT_EQ(owner.cache.Take(256), nullptr);
  owner.Free(all);
}

}  // namespace
}  // namespace weft
