#include "worker/collective/collective_mailbox.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace weft {
namespace collective {

const absl::Status* CollectiveMailbox::AbortedLocked(const ChunkKey& key) const {
  if (aborted_all_.has_value()) return &*aborted_all_;
  if (!aborted_steps_.empty()) {
    auto it = aborted_steps_.find(key.step_id);
    if (it != aborted_steps_.end()) return &it->second;
  }
  if (!aborted_collectives_.empty()) {
    auto it = aborted_collectives_.find(IdOf(key));
    if (it != aborted_collectives_.end()) return &it->second;
  }
  return nullptr;
}

void CollectiveMailbox::Deliver(const ChunkKey& key, ReceivedChunk chunk, const std::string& sender) {
  RecvCallback waiter;
  {
    absl::MutexLock lock(&mu_);
    if (AbortedLocked(key) != nullptr) return;  // `chunk` is released outside the lock
    auto [it, inserted] = entries_.try_emplace(SlotOfLocked(key, sender));
    if (inserted) {
      it->second.chunk.emplace(std::move(chunk));
      return;
    }
    if (!it->second.waiter) return;  // a duplicate
    waiter = std::move(it->second.waiter);
    entries_.erase(it);
  }
  waiter(absl::OkStatus(), std::move(chunk));
}

void CollectiveMailbox::RecvAsync(const ChunkKey& key, RecvCallback done, const std::string& expected_sender) {
  ReceivedChunk chunk;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (const absl::Status* aborted = AbortedLocked(key)) {
      status = *aborted;
    } else {
      auto [it, inserted] = entries_.try_emplace(SlotOfLocked(key, expected_sender));
      if (inserted || !it->second.chunk.has_value()) {
        it->second.waiter = std::move(done);
        return;
      }
      chunk = std::move(*it->second.chunk);
      entries_.erase(it);
    }
  }
  done(status, std::move(chunk));
}

template <typename Pred>
void CollectiveMailbox::TakeEntriesLocked(Pred pred, std::vector<RecvCallback>* waiters) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (!pred(it->first.key)) {
      ++it;
      continue;
    }
    if (it->second.waiter) waiters->push_back(std::move(it->second.waiter));
    entries_.erase(it++);
  }
}

namespace {
void FailAll(std::vector<RecvCallback>& waiters, const absl::Status& status) {
  for (RecvCallback& w : waiters) w(status, ReceivedChunk());
}
}  // namespace

void CollectiveMailbox::AbortCollective(const ChunkKey& key, const absl::Status& status) {
  std::vector<RecvCallback> waiters;
  {
    absl::MutexLock lock(&mu_);
    aborted_collectives_.try_emplace(IdOf(key), status);
    TakeEntriesLocked([&](const ChunkKey& k) { return k.SameCollective(key); }, &waiters);
  }
  FailAll(waiters, status);
}

void CollectiveMailbox::AbortStep(int64_t step_id, const absl::Status& status) {
  std::vector<RecvCallback> waiters;
  {
    absl::MutexLock lock(&mu_);
    aborted_steps_.try_emplace(step_id, status);
    TakeEntriesLocked([&](const ChunkKey& k) { return k.step_id == step_id; }, &waiters);
  }
  FailAll(waiters, status);
}

void CollectiveMailbox::Abort(const absl::Status& status) {
  std::vector<RecvCallback> waiters;
  {
    absl::MutexLock lock(&mu_);
    if (!aborted_all_.has_value()) aborted_all_ = status;
    TakeEntriesLocked([](const ChunkKey&) { return true; }, &waiters);
  }
  FailAll(waiters, status);
}

void CollectiveMailbox::Reset() {
  absl::MutexLock lock(&mu_);
  aborted_all_.reset();
}

void CollectiveMailbox::CleanupStep(int64_t step_id) {
  std::vector<RecvCallback> waiters;
  {
    absl::MutexLock lock(&mu_);
    aborted_steps_.erase(step_id);
    for (auto it = aborted_collectives_.begin(); it != aborted_collectives_.end();) {
      if (std::get<2>(it->first) == step_id) {
        aborted_collectives_.erase(it++);
      } else {
        ++it;
      }
    }
    TakeEntriesLocked([&](const ChunkKey& k) { return k.step_id == step_id; }, &waiters);
  }
  FailAll(waiters, absl::AbortedError(absl::StrCat("step ", step_id, " was cleaned up while a collective waited")));
}

size_t CollectiveMailbox::NumEntries() const {
  absl::MutexLock lock(&mu_);
  return entries_.size() + aborted_collectives_.size() + aborted_steps_.size();
}

}  // namespace collective
}  // namespace weft
