#include "runtime/gpu/gpu_allocator.h"

#include <iterator>
#include <new>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace weft {
namespace gpu {

GpuAllocator::GpuAllocator(int ordinal, cudaStream_t compute_stream, size_t max_cached_bytes)
    : ordinal_(ordinal), compute_(compute_stream), cache_(max_cached_bytes) {}

GpuAllocator::~GpuAllocator() {
  absl::MutexLock lock(&mu_);
  cudaSetDevice(ordinal_);
  cudaDeviceSynchronize();
  PollPendingLocked();
  FreeCachedLocked();
  for (auto& [id, blocks] : pool_free_) {
    for (Buffer* b : blocks) {
      cudaFree(b->data());
      DeleteExternalBlock(b);
    }
  }
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
}

Buffer* GpuAllocator::Allocate(size_t bytes) {
  absl::StatusOr<Buffer*> b = TryAllocate(bytes);
  if (!b.ok()) throw AllocationFailure(b.status());
  return *b;
}

absl::StatusOr<Buffer*> GpuAllocator::TryAllocate(size_t bytes) {
  if (bytes > kMaxRequestBytes) {
    // SizeClass would overflow rounding it up; no device holds this much.
    return absl::ResourceExhaustedError(absl::StrCat("GPU:", ordinal_, ": ", bytes, " bytes is more than any device has"));
  }
  const size_t cls = SizeClassCache::SizeClass(bytes);
  absl::MutexLock lock(&mu_);
  if (capturing_ != 0) {
    // A recording takes its own released blocks first.
    std::vector<Buffer*>& own = pool_free_[capturing_];
    for (size_t i = 0; i < own.size(); ++i) {
      if (own[i]->capacity() != cls) continue;
      Buffer* b = own[i];
      own[i] = own.back();
      own.pop_back();
      cache_.CountReuse(cls);
      b->Ref();  // released at 0 references
      return b;
    }
  }
  if (!pending_.empty()) PollPendingLocked();
  if (Buffer* b = cache_.Take(cls)) {
    if (capturing_ != 0) pool_of_[b] = capturing_;
    return b;
  }
  // On the allocator's GPU, leaving the thread's current device as it was.
  int previous = -1;
  cudaGetDevice(&previous);
  if (previous != ordinal_) cudaSetDevice(ordinal_);
  void* ptr = nullptr;
  cudaError_t e = cudaMalloc(&ptr, cls);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clears the sticky-free error state
    // Blocks released by the host may still be in use by queued kernels.
    cudaStreamSynchronize(compute_);
    PollPendingLocked();
    const size_t freed = FreeCachedLocked();
    Logger("gpu")->warn("GPU:{} out of memory for {} bytes; freed {} cached bytes and retrying", ordinal_, cls, freed);
    e = cudaMalloc(&ptr, cls);
  }
  if (previous >= 0 && previous != ordinal_) cudaSetDevice(previous);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("GPU:", ordinal_, ": cudaMalloc of ", cls, " bytes failed (",
                                                     cudaGetErrorString(e), "); ", cache_.stats().bytes_in_use,
                                                     " bytes in use"));
  }
  cache_.CountSystemAlloc(cls);
  Buffer* b = NewExternalBlock(this, ptr, cls);
  if (capturing_ != 0) pool_of_[b] = capturing_;
  return b;
}

int GpuAllocator::BeginPool() {
  absl::MutexLock lock(&mu_);
  capturing_ = ++last_pool_;
  pool_free_[capturing_];
  return capturing_;
}

void GpuAllocator::EndPool() {
  absl::MutexLock lock(&mu_);
  capturing_ = 0;
}

void GpuAllocator::ReleasePool(int id) {
  absl::MutexLock lock(&mu_);
  if (capturing_ == id) capturing_ = 0;
  for (auto it = pool_of_.begin(); it != pool_of_.end();) {
    auto next = std::next(it);
    if (it->second == id) pool_of_.erase(it);
    it = next;
  }
  auto free = pool_free_.find(id);
  if (free == pool_free_.end()) return;
  std::vector<Buffer*> blocks = std::move(free->second);
  pool_free_.erase(free);
  for (Buffer* b : blocks) CacheLocked(b);
}

size_t GpuAllocator::PooledBlocks() const {
  absl::MutexLock lock(&mu_);
  return pool_of_.size();
}

void GpuAllocator::RecordStream(const void* data, cudaStream_t stream) {
  if (stream == compute_) return;
  absl::MutexLock lock(&mu_);
  auto& streams = streams_[data];
  for (cudaStream_t s : streams) {
    if (s == stream) return;
  }
  streams.push_back(stream);
}

void GpuAllocator::Release(Buffer* buffer) {
  absl::MutexLock lock(&mu_);
  cache_.CountRelease(buffer->capacity());
  if (auto owned = pool_of_.find(buffer); owned != pool_of_.end()) {
    // A recording's block: only that recording may take it again.
    pool_free_[owned->second].push_back(buffer);
    return;
  }
  auto it = streams_.find(buffer->data());
  if (it == streams_.end()) {
    CacheLocked(buffer);
    return;
  }
  Pending p{buffer, {}};
  for (cudaStream_t s : it->second) {
    cudaEvent_t e = GetEventLocked();
    if (e == nullptr || cudaEventRecord(e, s) != cudaSuccess) {
      // Cannot order the reuse: wait for the stream instead.
      if (e != nullptr) spare_events_.push_back(e);
      cudaStreamSynchronize(s);
      continue;
    }
    p.events.push_back(e);
  }
  streams_.erase(it);
  if (p.events.empty()) {
    CacheLocked(buffer);
  } else {
    pending_.push_back(std::move(p));
  }
}

void GpuAllocator::PollPendingLocked() {
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    Pending& p = pending_[i];
    bool done = true;
    for (cudaEvent_t e : p.events) {
      const cudaError_t q = cudaEventQuery(e);
      if (q == cudaErrorNotReady) {
        done = false;
        break;
      }
      // An error here is the device's sticky error; the next sync reports it.
    }
    if (done) {
      for (cudaEvent_t e : p.events) spare_events_.push_back(e);
      CacheLocked(p.buffer);
    } else {
      pending_[kept++] = std::move(p);
    }
  }
  pending_.resize(kept);
}

void GpuAllocator::CacheLocked(Buffer* buffer) {
  if (cache_.Put(buffer)) return;
  // cudaFree waits for the device, so no queued kernel still uses the block.
  cudaFree(buffer->data());
  DeleteExternalBlock(buffer);
}

cudaEvent_t GpuAllocator::GetEventLocked() {
  if (!spare_events_.empty()) {
    cudaEvent_t e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return nullptr;
  return e;
}

size_t GpuAllocator::FreeCachedLocked() {
  std::vector<Buffer*> blocks;
  const size_t freed = cache_.TakeAll(&blocks);
  for (Buffer* b : blocks) {
    cudaFree(b->data());
    DeleteExternalBlock(b);
  }
  return freed;
}

void GpuAllocator::Trim() {
  absl::MutexLock lock(&mu_);
  cudaSetDevice(ordinal_);
  cudaDeviceSynchronize();
  PollPendingLocked();
  FreeCachedLocked();
}

Allocator::Stats GpuAllocator::GetStats() const {
  absl::MutexLock lock(&mu_);
  return cache_.stats();
}

PinnedAllocator::PinnedAllocator(size_t max_cached_bytes) : cache_(max_cached_bytes) {}

PinnedAllocator::~PinnedAllocator() {
  std::vector<Buffer*> blocks;
  {
    absl::MutexLock lock(&mu_);
    cache_.TakeAll(&blocks);
  }
  for (Buffer* b : blocks) {
    cudaFreeHost(b->data());
    DeleteExternalBlock(b);
  }
}

Buffer* PinnedAllocator::Allocate(size_t bytes) {
  absl::StatusOr<Buffer*> b = TryAllocate(bytes);
  if (!b.ok()) throw AllocationFailure(b.status());
  return *b;
}

absl::StatusOr<Buffer*> PinnedAllocator::TryAllocate(size_t bytes) {
  if (bytes > kMaxRequestBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("pinned host memory: ", bytes, " bytes is more than any host has"));
  }
  const size_t cls = SizeClassCache::SizeClass(bytes);
  {
    absl::MutexLock lock(&mu_);
    if (Buffer* b = cache_.Take(cls)) return b;
  }
  void* ptr = nullptr;
  // Portable: usable by every GPU of the process, not only the current one.
  const cudaError_t e = cudaHostAlloc(&ptr, cls, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("pinned host memory: cudaHostAlloc of ", cls, " bytes failed (", cudaGetErrorString(e), ")"));
  }
  absl::MutexLock lock(&mu_);
  cache_.CountSystemAlloc(cls);
  return NewExternalBlock(this, ptr, cls);
}

void PinnedAllocator::Release(Buffer* buffer) {
  {
    absl::MutexLock lock(&mu_);
    cache_.CountRelease(buffer->capacity());
    if (cache_.Put(buffer)) return;
  }
  cudaFreeHost(buffer->data());
  DeleteExternalBlock(buffer);
}

Allocator::Stats PinnedAllocator::GetStats() const {
  absl::MutexLock lock(&mu_);
  return cache_.stats();
}

}  // namespace gpu
}  // namespace weft
