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

absl::Status CollectiveMailbox::Deliver(const ChunkKey& key, ReceivedChunk chunk, const std::string& sender) {
  RecvCallback waiter;
  {
    absl::MutexLock lock(&mu_);
    if (AbortedLocked(key) != nullptr) return absl::OkStatus();  // `chunk` is released outside the lock
    const Slot slot = SlotOfLocked(key, sender);
    auto it = entries_.find(slot);
    if (it == entries_.end()) {
      const size_t bytes = chunk.size();
      if (bytes > max_buffered_bytes_ || buffered_bytes_ > max_buffered_bytes_ - bytes) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "collective chunk of ", bytes, " bytes (group ", key.group_key, ", instance ", key.instance_key,
            ", step ", key.step_id, ") arrived before its receive while ", buffered_bytes_,
            " bytes already wait; the quota (--max_pending_collective_bytes) is ", max_buffered_bytes_));
      }
      buffered_bytes_ += bytes;
      // A borrowed chunk's memory goes back to its ring when this returns.
      entries_.emplace(slot, Entry{chunk.borrowed ? chunk.Owned() : std::move(chunk), nullptr});
      return absl::OkStatus();
    }
    if (!it->second.waiter) return absl::OkStatus();  // a duplicate
    waiter = std::move(it->second.waiter);
    entries_.erase(it);
  }
  waiter(absl::OkStatus(), std::move(chunk));
  return absl::OkStatus();
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
      buffered_bytes_ -= chunk.size();
      entries_.erase(it);
    }
  }
  done(status, std::move(chunk));
}

template <typename Pred>
void CollectiveMailbox::TakeEntriesLocked(Pred pred, std::vector<RecvCallback>* waiters) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (!pred(it->first)) {
      ++it;
      continue;
    }
    if (it->second.waiter) waiters->push_back(std::move(it->second.waiter));
    if (it->second.chunk.has_value()) buffered_bytes_ -= it->second.chunk->size();
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
    TakeEntriesLocked([&](const Slot& s) { return s.key.SameCollective(key); }, &waiters);
  }
  FailAll(waiters, status);
}

void CollectiveMailbox::AbortStep(int64_t step_id, const absl::Status& status) {
  std::vector<RecvCallback> waiters;
  {
    absl::MutexLock lock(&mu_);
    aborted_steps_.try_emplace(step_id, status);
    TakeEntriesLocked([&](const Slot& s) { return s.key.step_id == step_id; }, &waiters);
  }
  FailAll(waiters, status);
}

void CollectiveMailbox::AbortReceivesFrom(const std::string& sender, int64_t group_key, const absl::Status& status) {
  std::vector<RecvCallback> waiters;
  {
    absl::MutexLock lock(&mu_);
    const int32_t id = SenderIdLocked(sender);
    TakeEntriesLocked([&](const Slot& s) { return s.sender == id && s.key.group_key == group_key; }, &waiters);
  }
  FailAll(waiters, status);
}

void CollectiveMailbox::Abort(const absl::Status& status) {
  std::vector<RecvCallback> waiters;
  {
    absl::MutexLock lock(&mu_);
    if (!aborted_all_.has_value()) aborted_all_ = status;
    TakeEntriesLocked([](const Slot&) { return true; }, &waiters);
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
    TakeEntriesLocked([&](const Slot& s) { return s.key.step_id == step_id; }, &waiters);
  }
  FailAll(waiters, absl::AbortedError(absl::StrCat("step ", step_id, " was cleaned up while a collective waited")));
}

size_t CollectiveMailbox::BufferedBytes() const {
  absl::MutexLock lock(&mu_);
  return buffered_bytes_;
}

size_t CollectiveMailbox::NumEntries() const {
  absl::MutexLock lock(&mu_);
  return entries_.size() + aborted_collectives_.size() + aborted_steps_.size();
}

}  // namespace collective
}  // namespace weft
