#include "common/size_class_cache.h"

#include <algorithm>

#include "common/allocator.h"

namespace weft {

size_t SizeClassCache::SizeClass(size_t bytes) {
  if (bytes <= 256) return 256;
  // Round up to the next multiple of an eighth of the enclosing power of two.
  size_t pow2 = 256;
  while (pow2 < bytes) pow2 <<= 1;
  const size_t step = pow2 / 8;  // classes: 5/8, 6/8, 7/8, 8/8 of pow2
  return (bytes + step - 1) / step * step;
}

void SizeClassCache::CountInUse(size_t cls) {
  stats_.bytes_in_use += static_cast<int64_t>(cls);
  if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

Buffer* SizeClassCache::Take(size_t cls) {
  auto it = free_.find(cls);
  if (it == free_.end() || it->second.empty()) return nullptr;
  Buffer* b = it->second.back();
  it->second.pop_back();
  stats_.bytes_cached -= static_cast<int64_t>(cls);
  CountInUse(cls);
  ++stats_.cache_hits;
  b->Ref();  // refs_ was left at 0 when it was released
  return b;
}

void SizeClassCache::CountSystemAlloc(size_t cls) {
  ++stats_.system_allocs;
  CountInUse(cls);
}

bool SizeClassCache::Put(Buffer* block) {
  const size_t cls = block->capacity();
  if (static_cast<size_t>(stats_.bytes_cached) + cls > max_cached_bytes_) return false;
  free_[cls].push_back(block);
  stats_.bytes_cached += static_cast<int64_t>(cls);
  return true;
}

size_t SizeClassCache::Evict(size_t bytes, std::vector<Buffer*>* out) {
  size_t moved = 0;
  size_t excess = bytes;
  for (auto it = free_.begin(); it != free_.end() && excess > 0; ++it) {
    while (!it->second.empty() && excess > 0) {
      out->push_back(it->second.back());
      it->second.pop_back();
      stats_.bytes_cached -= static_cast<int64_t>(it->first);
      moved += it->first;
      excess -= std::min(excess, it->first);
    }
  }
  return moved;
}

size_t SizeClassCache::TakeAll(std::vector<Buffer*>* out) {
  size_t moved = 0;
  for (auto& [cls, blocks] : free_) {
    out->insert(out->end(), blocks.begin(), blocks.end());
    moved += cls * blocks.size();
  }
  free_.clear();
  stats_.bytes_cached = 0;
  return moved;
}

}  // namespace weft
