// SizeClassCache: the bookkeeping that every caching allocator repeats:
// requests rounded up to size classes, one free list per class, a ceiling
// on the bytes kept for reuse, and the counters of Allocator::Stats.
//
// It only files and counts blocks; it never obtains or frees memory. The
// owner (CachingAllocator for host memory, gpu::GpuAllocator and
// gpu::PinnedAllocator for device and pinned memory) gets blocks from its
// system allocator, hands blocks the cache refuses or evicts back to it, and
// decides when a released block may be reused (a GPU block only once the
// streams that used it are done).
//
// Thread-safety: not thread-safe. The owner guards it with its own mutex
// (ABSL_GUARDED_BY on the member), the lock its Allocate and Release take
// anyway, so sharing the bookkeeping adds no lock of its own.
#ifndef WEFT_COMMON_SIZE_CLASS_CACHE_H_
#define WEFT_COMMON_SIZE_CLASS_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace weft {

class Buffer;

// An allocator's counters (also Allocator::Stats).
struct AllocatorStats {
  int64_t system_allocs = 0;  // blocks obtained from the system
  int64_t cache_hits = 0;     // allocations served from the cache
  int64_t bytes_in_use = 0;   // capacity of live buffers
  int64_t bytes_cached = 0;   // capacity kept for reuse
  int64_t peak_bytes_in_use = 0;
};

class SizeClassCache {
 public:
  // Keeps at most `max_cached_bytes` of released blocks; past that, Put
  // refuses and the owner frees the block.
  explicit SizeClassCache(size_t max_cached_bytes) : max_cached_bytes_(max_cached_bytes) {}
  // The owner empties the cache (TakeAll) before it goes: only the owner
  // knows how to free its blocks.
  ~SizeClassCache() = default;
  SizeClassCache(const SizeClassCache&) = delete;
  SizeClassCache& operator=(const SizeClassCache&) = delete;

  // The size a request of `bytes` is rounded up to: at least 256, then four
  // classes per power of two (5/8, 6/8, 7/8 and 8/8 of the enclosing one),
  // so at most ~19% of a block is slack.
  // REQUIRES: bytes <= SIZE_MAX / 2 (the rounding must not overflow).
  static size_t SizeClass(size_t bytes);

  // A cached block of class `cls`, handed out again with one reference and
  // counted as a cache hit in use; null when that class has none cached.
  Buffer* Take(size_t cls);
  // Counts a block of class `cls` that the owner just obtained from the
  // system as in use.
  void CountSystemAlloc(size_t cls);
  // Counts a block of class `cls` that the owner hands out again from a
  // keeping of its own (not this cache) as in use.
  void CountReuse(size_t cls) { CountInUse(cls); }
  // Counts a released block of class `cls` as no longer in use (whether or
  // not it is then cached).
  void CountRelease(size_t cls) { stats_.bytes_in_use -= static_cast<int64_t>(cls); }
  // Files the released block (whose reference count is 0 and whose
  // capacity() is its class) for reuse. False when that would cache more
  // than max_cached_bytes: the block stays the caller's to free.
  bool Put(Buffer* block);
  // Moves cached blocks into *out until at least `bytes` bytes are gone or
  // nothing is cached; returns the bytes moved. The caller frees them.
  size_t Evict(size_t bytes, std::vector<Buffer*>* out);
  // Moves every cached block into *out; returns their bytes.
  size_t TakeAll(std::vector<Buffer*>* out);

  const AllocatorStats& stats() const { return stats_; }

 private:
  void CountInUse(size_t cls);

  const size_t max_cached_bytes_;
  absl::flat_hash_map<size_t, std::vector<Buffer*>> free_;
  AllocatorStats stats_;
};

}  // namespace weft

#endif  // WEFT_COMMON_SIZE_CLASS_CACHE_H_
