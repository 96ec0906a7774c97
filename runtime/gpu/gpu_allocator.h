// Caching allocators for one GPU: device memory and pinned host memory.
//
// GpuAllocator keeps released device blocks in a SizeClassCache
// (common/size_class_cache.h, the bookkeeping CachingAllocator uses too)
// and hands them out again, so a step
// that allocates the same shapes calls cudaMalloc only while warming up
// (Stats::system_allocs counts cudaMalloc calls).
//
// Reuse is stream-ordered on the device's compute stream: every kernel that
// reads or writes a buffer is enqueued on that stream before the host drops
// the buffer's last reference, so a later kernel that gets the block runs
// after them, and the block is reusable as soon as it is released. A buffer
// that work on another stream uses (a copy stream, NCCL) is marked with
// RecordStream(data, stream); its release then records an event on each
// such stream and the block returns to the cache only once those events have
// completed (checked without blocking on each Allocate).
//
// Out of device memory: the cache is freed (after a device sync) and the
// allocation retried once; then TryAllocate returns RESOURCE_EXHAUSTED
// naming the GPU, the bytes and CUDA's error. Allocate, the Allocator
// interface (whose contract is operator new's), throws that Status inside an
// AllocationFailure, a std::bad_alloc whose what() is the message, so
// Tensor::Allocate's RESOURCE_EXHAUSTED carries it.
//
// Recording a step (a CUDA graph, GpuDevice::BeginStepCapture): the
// recorded kernels keep the addresses they were given, so every block handed
// out while a recording is open belongs to that recording's pool for as long
// as the recording exists. Released, such a block goes back to its pool, not
// the cache: the same recording may take it again (its own kernels are
// ordered), nobody else may. ReleasePool returns the pool's blocks to the
// cache once the recording's last launch is done.
//
// PinnedAllocator caches page-locked host blocks (cudaHostAlloc) the same
// way, without stream tracking: host code using a pinned block waits for
// its copies itself.
//
// Thread-safety: thread-safe.
#ifndef WEFT_RUNTIME_GPU_GPU_ALLOCATOR_H_
#define WEFT_RUNTIME_GPU_GPU_ALLOCATOR_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/allocator.h"
#include "common/size_class_cache.h"

namespace weft {
namespace gpu {

// What Allocate throws when TryAllocate fails: a std::bad_alloc (so that
// code catching operator new's failure catches it) carrying the Status.
class AllocationFailure : public std::bad_alloc {
 public:
  explicit AllocationFailure(absl::Status status)
      : status_(std::move(status)), message_(status_.ToString()) {}
  const char* what() const noexcept override { return message_.c_str(); }
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
  std::string message_;
};

// Larger requests fail at once: the size-class rounding could not hold them.
inline constexpr size_t kMaxRequestBytes = size_t{1} << 52;

class GpuAllocator final : public Allocator {
 public:
  // `compute_stream`: the stream reuse is ordered on; borrowed, outlives this.
  GpuAllocator(int ordinal, cudaStream_t compute_stream, size_t max_cached_bytes = size_t{16} << 30);
  ~GpuAllocator() override;  // REQUIRES: no live buffers; frees the cache

  Buffer* Allocate(size_t bytes) override;
  // Allocate without the exception: RESOURCE_EXHAUSTED naming the GPU, the
  // bytes and CUDA's error when device memory runs out (after one retry with
  // the cache freed).
  absl::StatusOr<Buffer*> TryAllocate(size_t bytes);
  Stats GetStats() const override;
  bool on_host() const override { return false; }

  // Marks the live buffer whose data() is `data` as used by work on
  // `stream` (other than the compute stream): its block is reused only after
  // that work completes. A pointer this allocator did not hand out is ignored.
  void RecordStream(const void* data, cudaStream_t stream);
  // Frees every cached block (waits for the device first).
  void Trim();

  // Opens a recording's pool (one at a time) and returns its id; blocks
  // handed out until EndPool belong to it.
  int BeginPool();
  void EndPool();
  // The pool's released blocks go back to the cache, and its live ones will
  // when released. REQUIRES: no work enqueued still uses them.
  void ReleasePool(int id);
  // Blocks that belong to pools, for tests.
  size_t PooledBlocks() const;

 protected:
  void Release(Buffer* buffer) override;

 private:
  struct Pending {
    Buffer* buffer;
    absl::InlinedVector<cudaEvent_t, 2> events;
  };
  // Moves released blocks whose events completed into the cache.
  void PollPendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CacheLocked(Buffer* buffer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  cudaEvent_t GetEventLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the cached blocks; returns how many bytes it gave back.
  size_t FreeCachedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int ordinal_;
  cudaStream_t const compute_;
  mutable absl::Mutex mu_;
  SizeClassCache cache_ ABSL_GUARDED_BY(mu_);
  // Live buffers used on other streams, by data pointer.
  absl::flat_hash_map<const void*, absl::InlinedVector<cudaStream_t, 2>> streams_ ABSL_GUARDED_BY(mu_);
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<cudaEvent_t> spare_events_ ABSL_GUARDED_BY(mu_);
  // Recordings: the open pool (0: none), which pool each of their blocks
  // belongs to, and each pool's released blocks.
  int capturing_ ABSL_GUARDED_BY(mu_) = 0;
  int last_pool_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<const Buffer*, int> pool_of_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, std::vector<Buffer*>> pool_free_ ABSL_GUARDED_BY(mu_);
};

class PinnedAllocator final : public Allocator {
 public:
  explicit PinnedAllocator(size_t max_cached_bytes = size_t{1} << 30);
  ~PinnedAllocator() override;  // REQUIRES: no live buffers; frees the cache

  Buffer* Allocate(size_t bytes) override;
  // Allocate without the exception: RESOURCE_EXHAUSTED when cudaHostAlloc fails.
  absl::StatusOr<Buffer*> TryAllocate(size_t bytes);
  Stats GetStats() const override;

 protected:
  void Release(Buffer* buffer) override;

 private:
  mutable absl::Mutex mu_;
  SizeClassCache cache_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpu
}  // namespace weft

#endif  // WEFT_RUNTIME_GPU_GPU_ALLOCATOR_H_
