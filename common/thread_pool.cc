#include "common/thread_pool.h"

#include <algorithm>
#include <atomic>

#include "absl/synchronization/blocking_counter.h"

namespace weft {

ThreadPool::ThreadPool(std::string name, int num_threads) : name_(std::move(name)) {
  threads_.reserve(std::max(0, num_threads));
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (auto& t : threads_) t.join();
}

void ThreadPool::Schedule(std::function<void()> fn) {
  if (threads_.empty()) {
    fn();
    return;
  }
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(fn));
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stopping_ || !p->queue_.empty(); },
          this));
      if (queue_.empty()) return;  // stopping and drained
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_block, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_block = std::max<int64_t>(1, min_block);
  const int64_t max_blocks = static_cast<int64_t>(threads_.size()) + 1;
  const int64_t blocks = std::min(max_blocks, (n + min_block - 1) / min_block);
  if (blocks <= 1) {
    fn(0, n);
    return;
  }
  const int64_t per = (n + blocks - 1) / blocks;
  absl::BlockingCounter done(static_cast<int>(blocks - 1));
  for (int64_t b = 1; b < blocks; ++b) {
    const int64_t begin = b * per;
    const int64_t end = std::min(n, begin + per);
    Schedule([&fn, &done, begin, end] {
      if (begin < end) fn(begin, end);
      done.DecrementCount();
    });
  }
  fn(0, std::min(n, per));
  done.Wait();
}

int NumCores() { return std::max(1u, std::thread::hardware_concurrency()); }

}  // namespace weft
