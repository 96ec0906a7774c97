// Memory for tensor payloads.
//
// A Buffer is a 64-byte-aligned block with an intrusive, atomic reference
// count kept in a header just before the payload, so handing a buffer around
// costs no allocation of its own. When the last reference goes, the buffer
// returns to the allocator that made it.
//
// CachingAllocator keeps released blocks in size classes and hands them out
// again, so a training step that allocates the same shapes every step reaches
// the system allocator only during its first steps (see Stats::system_allocs).
// On these machines a fresh 64 MiB allocation plus first touch costs ~50x a
// copy into a warm block, which is why caching is the default.
//
// An allocator's memory is host memory (dereferenceable here) unless its
// on_host() says otherwise: a GPU's device allocator hands out buffers whose
// header lives on the host and whose payload lives on the device.
//
// Thread-safety: every method of every class here is thread-safe.
#ifndef WEFT_COMMON_ALLOCATOR_H_
#define WEFT_COMMON_ALLOCATOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/size_class_cache.h"

namespace weft {

inline constexpr size_t kTensorAlignment = 64;

class Allocator;

class Buffer {
 public:
  void* data() { return data_; }
  const void* data() const { return data_; }
  // False when data() is device memory, which host code must not touch.
  bool on_host() const;
  // Usable bytes; at least what was asked for.
  size_t capacity() const { return capacity_; }

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref();
  bool RefCountIsOne() const { return refs_.load(std::memory_order_acquire) == 1; }

  static constexpr size_t kHeaderBytes = kTensorAlignment;

 private:
  friend class Allocator;
  Buffer(Allocator* owner, void* data, size_t capacity)
      : refs_(1), capacity_(capacity), owner_(owner), data_(data) {}

  std::atomic<int32_t> refs_;
  size_t capacity_;
  Allocator* owner_;
  void* data_;  // right after the header, or memory the owner manages (device, pinned)
};
static_assert(sizeof(Buffer) <= Buffer::kHeaderBytes, "buffer header must fit its slot");

class Allocator {
 public:
  using Stats = AllocatorStats;

  virtual ~Allocator() = default;
  // Returns a buffer with one reference and at least `bytes` usable bytes
  // (a zero-byte request still returns a valid buffer). Never null: running
  // out of memory aborts, as operator new would.
  virtual Buffer* Allocate(size_t bytes) = 0;
  virtual Stats GetStats() const = 0;
  // False for an allocator of device memory: its buffers' data() must be
  // copied to the host before host code reads or writes it.
  virtual bool on_host() const { return true; }

 protected:
  friend class Buffer;
  virtual void Release(Buffer* buffer) = 0;
  // Helpers for subclasses: a fresh block from the system, and its disposal.
  static Buffer* NewBlock(Allocator* owner, size_t capacity);
  static void DeleteBlock(Buffer* buffer);
  // A header (on the host) for `capacity` bytes at `data`, memory that the
  // subclass obtained and frees itself (device or pinned memory); disposed of
  // with DeleteExternalBlock, which leaves `data` alone.
  static Buffer* NewExternalBlock(Allocator* owner, void* data, size_t capacity);
  static void DeleteExternalBlock(Buffer* buffer);
};

// Caches released blocks by size class (SizeClassCache: four classes per
// power of two, so at most ~19% of a block is slack). Holds at most
// `max_cached_bytes` of free blocks; past that, released blocks are freed.
class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(size_t max_cached_bytes = size_t{2} << 30);
  ~CachingAllocator() override;

  Buffer* Allocate(size_t bytes) override;
  Stats GetStats() const override;
  // Frees every cached block (live buffers are untouched).
  void Trim();
  // The most bytes of live buffers (counted by size class) this allocator
  // hands out; 0, the default, is no limit. A daemon sets its memory budget
  // here, so that a step asking for more fails with RESOURCE_EXHAUSTED
  // (Tensor::Allocate) instead of the kernel's OOM killer ending the process.
  // Over the limit, Allocate first frees cached blocks, then throws
  // std::bad_alloc. Checked only when the cache misses, under the lock that
  // path takes anyway.
  void SetLimit(size_t bytes) { limit_.store(bytes, std::memory_order_relaxed); }
  size_t limit() const { return limit_.load(std::memory_order_relaxed); }

  // The size a request of `bytes` is rounded up to.
  static size_t SizeClass(size_t bytes) { return SizeClassCache::SizeClass(bytes); }

 protected:
  void Release(Buffer* buffer) override;

 private:
  mutable absl::Mutex mu_;
  std::atomic<size_t> limit_{0};
  SizeClassCache cache_ ABSL_GUARDED_BY(mu_);
};

// The process-wide allocator for CPU tensors (a CachingAllocator).
Allocator* CpuAllocator();

}  // namespace weft

#endif  // WEFT_COMMON_ALLOCATOR_H_
