// A fixed set of threads running closures in FIFO order.
//
// ParallelFor splits [0, n) into at most one block per thread (plus the
// caller, which runs a block itself) and returns when every block is done.
// A pool of zero threads runs everything inline on the caller.
//
// Thread-safety: thread-safe. The destructor waits for queued closures.
#ifndef WEFT_COMMON_THREAD_POOL_H_
#define WEFT_COMMON_THREAD_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace weft {

class ThreadPool {
 public:
  ThreadPool(std::string name, int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> fn);
  // Calls fn(begin, end) on disjoint blocks covering [0, n); blocks have at
  // least `min_block` items so tiny loops stay on the caller.
  void ParallelFor(int64_t n, int64_t min_block, const std::function<void(int64_t, int64_t)>& fn);

  int num_threads() const { return static_cast<int>(threads_.size()); }

 private:
  void WorkerLoop();

  const std::string name_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// Number of hardware threads (at least 1).
int NumCores();

}  // namespace weft

#endif  // WEFT_COMMON_THREAD_POOL_H_
