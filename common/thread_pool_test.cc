#include "common/thread_pool.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(ThreadPoolTest, RunsEveryScheduledClosure) {
  std::atomic<int> sum{0};
  {
    ThreadPool pool("test", 3);
    absl::BlockingCounter done(100);
    for (int i = 1; i <= 100; ++i) {
      pool.Schedule([&, i] {
        sum += i;
        done.DecrementCount();
      });
    }
    done.Wait();
  }
  EXPECT_EQ(sum.load(), 5050);
}

TEST(ThreadPoolTest, ParallelForCoversRangeOnce) {
  for (int threads : {0, 1, 4}) {
    ThreadPool pool("test", threads);
    std::vector<std::atomic<int>> hits(1000);
    pool.ParallelFor(1000, 10, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPoolTest, DestructorDrainsQueue) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool("test", 2);
    for (int i = 0; i < 50; ++i) pool.Schedule([&] { ran++; });
  }
  EXPECT_EQ(ran.load(), 50);
}

}  // namespace
}  // namespace weft
