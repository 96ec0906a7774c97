#include "worker/pull_deadlines.h"

#include <algorithm>
#include <utility>

namespace weft {
namespace worker {

PullDeadlines::~PullDeadlines() {
  std::thread thread;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    thread = std::move(thread_);
  }
  if (thread.joinable()) thread.join();
}

void PullDeadlines::Add(std::function<bool()> finished, std::function<void()> expire) {
  // Finished waits at the front go first; their `finished` runs outside
  // the lock, so each is taken out, asked, and put back if still waiting.
  while (true) {
    Entry front;
    {
      absl::MutexLock lock(&mu_);
      if (entries_.empty()) break;
      front = std::move(entries_.front());
      entries_.pop_front();
    }
    if (!front.finished()) {
      absl::MutexLock lock(&mu_);
      entries_.push_front(std::move(front));
      break;
    }
  }
  std::deque<Entry> sweep;
  {
    absl::MutexLock lock(&mu_);
    entries_.push_back(Entry{absl::Now() + timeout_, std::move(finished), std::move(expire)});
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
    if (entries_.size() >= kSweepAt) sweep.swap(entries_);
  }
  if (sweep.empty()) return;
  // Rare: a wait at the front outlasted thousands behind it.
  sweep.erase(std::remove_if(sweep.begin(), sweep.end(), [](const Entry& e) { return e.finished(); }), sweep.end());
  absl::MutexLock lock(&mu_);
  // Entries added meanwhile are newer than every swept one.
  for (auto it = sweep.rbegin(); it != sweep.rend(); ++it) entries_.push_front(std::move(*it));
}

size_t PullDeadlines::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

void PullDeadlines::Loop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(
        +[](PullDeadlines* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stopping_ || !p->entries_.empty(); },
        this));
    if (stopping_) return;
    waking_at_ = entries_.front().deadline;
    if (absl::Now() < waking_at_) {
      // Entries added later expire later; only stopping, or older entries
      // put back in front (Add's sweep), need an earlier wake.
      mu_.AwaitWithDeadline(absl::Condition(
                                +[](PullDeadlines* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
                                  return p->stopping_ || p->entries_.empty() ||
                                         p->entries_.front().deadline < p->waking_at_;
                                },
                                this),
                            waking_at_);
      continue;
    }
    Entry e = std::move(entries_.front());
    entries_.pop_front();
    mu_.Unlock();
    if (!e.finished()) e.expire();
    mu_.Lock();
  }
}

}  // namespace worker
}  // namespace weft
