// PullDeadlines: ends the waits that outlive their deadline. A pull over
// gRPC carries its deadline in the call; one through shared memory
// (worker/ring_pulls.h) has no call, so its puller registers it here and
// fails it when the same timeout passes with no reply, as gRPC would.
//
// Every wait of one PullDeadlines has the same timeout, so deadlines come in
// the order waits were added: a FIFO whose front expires next, watched by
// one thread (started on the first Add). Waits that finish leave their
// entry behind; Add drops such entries from the front, and sweeps the whole
// queue once it grows past kSweepAt, so a long wait at the front cannot
// make it hold every pull since.
//
// Thread-safety: thread-safe. `finished` and `expire` run without the lock,
// `expire` on the watching thread. The destructor joins the thread without
// running the waits still queued.
#ifndef WEFT_WORKER_PULL_DEADLINES_H_
#define WEFT_WORKER_PULL_DEADLINES_H_

#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace weft {
namespace worker {

class PullDeadlines {
 public:
  static constexpr size_t kSweepAt = 4096;

  explicit PullDeadlines(absl::Duration timeout) : timeout_(timeout) {}
  ~PullDeadlines();
  PullDeadlines(const PullDeadlines&) = delete;
  PullDeadlines& operator=(const PullDeadlines&) = delete;

  // Calls `expire` once the timeout has passed, unless `finished` says by
  // then that the wait is over.
  void Add(std::function<bool()> finished, std::function<void()> expire);
  // Waits registered and not yet dropped (for tests).
  size_t size() const;

 private:
  struct Entry {
    absl::Time deadline;
    std::function<bool()> finished;
    std::function<void()> expire;
  };
  void Loop();

  const absl::Duration timeout_;
  mutable absl::Mutex mu_;
  std::deque<Entry> entries_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time waking_at_ ABSL_GUARDED_BY(mu_);  // the deadline the thread sleeps until
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace worker
}  // namespace weft

#endif  // WEFT_WORKER_PULL_DEADLINES_H_
