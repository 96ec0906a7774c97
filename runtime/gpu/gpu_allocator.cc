#include "runtime/gpu/gpu_allocator.h"

#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace weft {
namespace gpu {

GpuAllocator::GpuAllocator(int ordinal, cudaStream_t compute_stream, size_t max_cached_bytes)
    : ordinal_(ordinal), compute_(compute_stream), max_cached_bytes_(max_cached_bytes) {}

GpuAllocator::~GpuAllocator() {
  absl::MutexLock lock(&mu_);
  cudaSetDevice(ordinal_);
  cudaDeviceSynchronize();
  PollPendingLocked();
  FreeCachedLocked();
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
  const size_t cls = CachingAllocator::SizeClass(bytes);
  absl::MutexLock lock(&mu_);
  if (!pending_.empty()) PollPendingLocked();
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
                                                     cudaGetErrorString(e), "); ", stats_.bytes_in_use,
                                                     " bytes in use"));
  }
  ++stats_.system_allocs;
  stats_.bytes_in_use += static_cast<int64_t>(cls);
  if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
  return NewExternalBlock(this, ptr, cls);
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
  stats_.bytes_in_use -= static_cast<int64_t>(buffer->capacity());
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
  const size_t cls = buffer->capacity();
  if (static_cast<size_t>(stats_.bytes_cached) + cls <= max_cached_bytes_) {
    free_[cls].push_back(buffer);
    stats_.bytes_cached += static_cast<int64_t>(cls);
    return;
  }
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
  size_t freed = 0;
  for (auto& [cls, blocks] : free_) {
    for (Buffer* b : blocks) {
      cudaFree(b->data());
      DeleteExternalBlock(b);
      freed += cls;
    }
  }
  free_.clear();
  stats_.bytes_cached = 0;
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
  return stats_;
}

PinnedAllocator::PinnedAllocator(size_t max_cached_bytes) : max_cached_bytes_(max_cached_bytes) {}

PinnedAllocator::~PinnedAllocator() {
  absl::MutexLock lock(&mu_);
  for (auto& [cls, blocks] : free_) {
    for (Buffer* b : blocks) {
      cudaFreeHost(b->data());
      DeleteExternalBlock(b);
    }
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
  const size_t cls = CachingAllocator::SizeClass(bytes);
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
      b->Ref();
      return b;
    }
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
  ++stats_.system_allocs;
  stats_.bytes_in_use += static_cast<int64_t>(cls);
  if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
  return NewExternalBlock(this, ptr, cls);
}

void PinnedAllocator::Release(Buffer* buffer) {
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
  cudaFreeHost(buffer->data());
  DeleteExternalBlock(buffer);
}

Allocator::Stats PinnedAllocator::GetStats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace gpu
}  // namespace weft
