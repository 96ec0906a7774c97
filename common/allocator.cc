#include "common/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <new>

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

CachingAllocator::CachingAllocator(size_t max_cached_bytes) : max_cached_bytes_(max_cached_bytes) {}

CachingAllocator::~CachingAllocator() { Trim(); }

size_t CachingAllocator::SizeClass(size_t bytes) {
  if (bytes <= 256) return 256;
  // Round up to the next multiple of a quarter of the enclosing power of two.
  size_t pow2 = 256;
  while (pow2 < bytes) pow2 <<= 1;
  const size_t step = pow2 / 8;  // classes: 5/8, 6/8, 7/8, 8/8 of pow2
  return (bytes + step - 1) / step * step;
}

Buffer* CachingAllocator::Allocate(size_t bytes) {
  const size_t cls = SizeClass(bytes);
  std::vector<Buffer*> drop;  // cached blocks freed to stay under the limit
  {
    absl::MutexLock lock(&mu_);
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      Buffer* b = it->second.back();
      it->second.pop_back();
      stats_.bytes_cached -= static_cast<int64_t>(cls);
      stats_.bytes_in_use += static_cast<int64_t>(cls);
      if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
      ++stats_.cache_hits;
      b->Ref();  // refs_ was left at 0 when it was released
      return b;
    }
    const size_t limit = limit_.load(std::memory_order_relaxed);
    if (limit != 0) {
      const size_t in_use = static_cast<size_t>(stats_.bytes_in_use);
      if (in_use > limit || cls > limit - in_use) throw std::bad_alloc();
      // Cached blocks are memory too: give back what the new block needs.
      if (static_cast<size_t>(stats_.bytes_cached) > limit - in_use - cls) {
        size_t excess = static_cast<size_t>(stats_.bytes_cached) - (limit - in_use - cls);
        for (auto it = free_.begin(); it != free_.end() && excess > 0; ++it) {
          while (!it->second.empty() && excess > 0) {
            drop.push_back(it->second.back());
            it->second.pop_back();
            stats_.bytes_cached -= static_cast<int64_t>(it->first);
            excess -= std::min(excess, it->first);
          }
        }
      }
    }
    ++stats_.system_allocs;
    stats_.bytes_in_use += static_cast<int64_t>(cls);
    if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }
  for (Buffer* b : drop) DeleteBlock(b);
  return NewBlock(this, cls);
}

void CachingAllocator::Release(Buffer* buffer) {
  const size_t cls = buffer->capacity();
  {
    absl::MutexLock lock(&mu_);
    stats_.bytes_in_use -= static_cast<int64_t>(cls);
    if (static_cast<size_t>(stats_.bytes_cached) + cls <= max_cached_bytes_) {
      free_[cls].push_back(buffer);
      stats_.bytes_cached += static_cast<int64_t>(cls);
      return;
    }
  }
  DeleteBlock(buffer);
}

void CachingAllocator::Trim() {
  absl::flat_hash_map<size_t, std::vector<Buffer*>> drop;
  {
    absl::MutexLock lock(&mu_);
    drop.swap(free_);
    stats_.bytes_cached = 0;
  }
  for (auto& [cls, blocks] : drop) {
    for (Buffer* b : blocks) DeleteBlock(b);
  }
}

Allocator::Stats CachingAllocator::GetStats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

Allocator* CpuAllocator() {
  static CachingAllocator* const allocator = new CachingAllocator();  // never destroyed
  return allocator;
}

}  // namespace weft
