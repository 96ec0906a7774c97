#include "common/allocator.h"

#include <cstdlib>
#include <new>
#include <vector>

namespace weft {

void Buffer::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) owner_->Release(this);
}

Buffer* Allocator::NewBlock(Allocator* owner, size_t capacity) {
  void* mem = std::aligned_alloc(kTensorAlignment, Buffer::kHeaderBytes + capacity);
  if (mem == nullptr) throw std::bad_alloc();
  return new (mem) Buffer(owner, static_cast<char*>(mem) + Buffer::kHeaderBytes, capacity);
}

Buffer* Allocator::NewExternalBlock(Allocator* owner, void* data, size_t capacity) {
  return new Buffer(owner, data, capacity);
}

void Allocator::DeleteExternalBlock(Buffer* buffer) { delete buffer; }

bool Buffer::on_host() const { return owner_->on_host(); }

void Allocator::DeleteBlock(Buffer* buffer) {
  buffer->~Buffer();
  std::free(buffer);
}

CachingAllocator::CachingAllocator(size_t max_cached_bytes) : cache_(max_cached_bytes) {}

CachingAllocator::~CachingAllocator() { Trim(); }

Buffer* CachingAllocator::Allocate(size_t bytes) {
  const size_t cls = SizeClass(bytes);
  std::vector<Buffer*> drop;  // cached blocks freed to stay under the limit
  {
    absl::MutexLock lock(&mu_);
    if (Buffer* b = cache_.Take(cls)) return b;
    const size_t limit = limit_.load(std::memory_order_relaxed);
    if (limit != 0) {
      const AllocatorStats& stats = cache_.stats();
      const size_t in_use = static_cast<size_t>(stats.bytes_in_use);
      if (in_use > limit || cls > limit - in_use) throw std::bad_alloc();
      // Cached blocks are memory too: give back what the new block needs.
      const size_t room = limit - in_use - cls;
      if (static_cast<size_t>(stats.bytes_cached) > room) {
        cache_.Evict(static_cast<size_t>(stats.bytes_cached) - room, &drop);
      }
    }
    cache_.CountSystemAlloc(cls);
  }
  for (Buffer* b : drop) DeleteBlock(b);
  return NewBlock(this, cls);
}

void CachingAllocator::Release(Buffer* buffer) {
  {
    absl::MutexLock lock(&mu_);
    cache_.CountRelease(buffer->capacity());
    if (cache_.Put(buffer)) return;
  }
  DeleteBlock(buffer);
}

void CachingAllocator::Trim() {
  std::vector<Buffer*> drop;
  {
    absl::MutexLock lock(&mu_);
    cache_.TakeAll(&drop);
  }
  for (Buffer* b : drop) DeleteBlock(b);
}

Allocator::Stats CachingAllocator::GetStats() const {
  absl::MutexLock lock(&mu_);
  return cache_.stats();
}

Allocator* CpuAllocator() {
  static CachingAllocator* const allocator = new CachingAllocator();  // never destroyed
  return allocator;
}

}  // namespace weft
