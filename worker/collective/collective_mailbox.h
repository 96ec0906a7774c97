// CollectiveMailbox: where chunks sent to this process wait for the
// collective that consumes them, and where that collective waits for them.
//
// Transports Deliver every chunk that arrives; the collective engine asks for
// each chunk it needs with RecvAsync. Whichever comes second completes the
// hand-off, so chunks may arrive before their collective has started here
// (they are buffered, owned by their transport's slices) or after (the
// callback is waiting). An entry lives only between those two events, so a
// collective that finishes leaves nothing behind.
//
// Failure: AbortCollective, AbortStep and Abort fail the waiting receives
// they cover with the given status and drop their buffered chunks. Chunks and
// receives that come later for an aborted collective or step are dropped or
// failed at once, until CleanupStep(step_id) forgets the abort (the master
// sends CleanupStep after every step). Abort covers everything until Reset.
//
// Senders: with check_senders, a chunk is filed under the identity of the
// task that sent it (the transport's authenticated peer) and a receive
// names the task it expects, the group's member at the sending rank; a
// chunk from anyone else never satisfies it, so a forged chunk can neither
// take a real one's place nor be summed. Without, senders are ignored
// (insecure clusters, in-process tests).
//
// Bound: chunks that arrive before their receive (unsolicited) are held in
// memory, so at most `max_buffered_bytes` of them are; Deliver refuses one
// beyond that with RESOURCE_EXHAUSTED (the transport ends the sender's
// stream with it, failing that collective on the sender) and keeps nothing.
// A chunk whose receive already waits is always accepted: it is handed over
// at once, never buffered. A borrowed chunk (ReceivedChunk::borrowed) that
// has to wait is copied first; one whose receive waits is handed over as is,
// and the receive's callback must copy what it keeps past returning.
//
// Thread-safety: thread-safe. Callbacks run outside the lock, on the thread
// that called Deliver, RecvAsync or an Abort*.
#ifndef WEFT_WORKER_COLLECTIVE_COLLECTIVE_MAILBOX_H_
#define WEFT_WORKER_COLLECTIVE_COLLECTIVE_MAILBOX_H_

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "worker/collective/collective_types.h"

namespace weft {
namespace collective {

class CollectiveMailbox {
 public:
  static constexpr size_t kDefaultMaxBufferedBytes = size_t{512} << 20;

  explicit CollectiveMailbox(bool check_senders = false, size_t max_buffered_bytes = kDefaultMaxBufferedBytes)
      : check_senders_(check_senders), max_buffered_bytes_(max_buffered_bytes) {}
  CollectiveMailbox(const CollectiveMailbox&) = delete;
  CollectiveMailbox& operator=(const CollectiveMailbox&) = delete;

  // A chunk arrived. A second chunk under the same key replaces nothing: it
  // is dropped as a duplicate (it can only come from a misbehaving peer).
  // `sender`: the sending task as the transport authenticated it.
  // RESOURCE_EXHAUSTED, naming the quota and its flag, when it would have to
  // be buffered beyond max_buffered_bytes; OK otherwise (also for a chunk
  // dropped as a duplicate or for an aborted collective).
  absl::Status Deliver(const ChunkKey& key, ReceivedChunk chunk, const std::string& sender = "");
  // Calls `done` with the chunk under `key` from `expected_sender` once it
  // is here. REQUIRES: at most one RecvAsync per key.
  void RecvAsync(const ChunkKey& key, RecvCallback done, const std::string& expected_sender = "");

  // Fails the collective of `key` (its group, instance and step; round, chunk
  // and src_rank are ignored). REQUIRES: !status.ok().
  void AbortCollective(const ChunkKey& key, const absl::Status& status);
  void AbortStep(int64_t step_id, const absl::Status& status);
  // Fails the receives of group `group_key` that wait for a chunk from
  // `sender` (its transport is gone), dropping such chunks buffered;
  // remembers nothing, so later receives are unaffected. Without
  // check_senders it covers every receive of the group.
  // REQUIRES: !status.ok().
  void AbortReceivesFrom(const std::string& sender, int64_t group_key, const absl::Status& status);
  void Abort(const absl::Status& status);
  // Lifts Abort (not per-step or per-collective aborts).
  void Reset();
  // Drops the step's buffered chunks and forgets its aborts.
  void CleanupStep(int64_t step_id);

  // Buffered chunks plus waiting receives plus remembered aborts (for tests:
  // zero once every step is finished and cleaned up).
  size_t NumEntries() const;
  // Bytes of chunks buffered for receives not yet made.
  size_t BufferedBytes() const;

 private:
  using CollectiveId = std::tuple<int64_t, int64_t, int64_t>;  // group, instance, step
  static CollectiveId IdOf(const ChunkKey& k) { return {k.group_key, k.instance_key, k.step_id}; }

  struct Slot {
    ChunkKey key;
    int32_t sender;  // SenderIdLocked's number; 0 unless check_senders_
    bool operator==(const Slot& o) const { return key == o.key && sender == o.sender; }
    template <typename H>
    friend H AbslHashValue(H h, const Slot& s) {
      return H::combine(std::move(h), s.key, s.sender);
    }
  };
  // Senders are numbered once, so that filing a chunk allocates nothing.
  int32_t SenderIdLocked(const std::string& sender) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!check_senders_) return 0;
    auto it = sender_ids_.find(sender);
    if (it != sender_ids_.end()) return it->second;
    const int32_t id = static_cast<int32_t>(sender_ids_.size()) + 1;
    sender_ids_.emplace(sender, id);
    return id;
  }
  Slot SlotOfLocked(const ChunkKey& key, const std::string& sender) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return Slot{key, SenderIdLocked(sender)};
  }

  struct Entry {
    std::optional<ReceivedChunk> chunk;  // arrived first
    RecvCallback waiter;                 // asked first
  };

  // The abort covering `key`, if any.
  const absl::Status* AbortedLocked(const ChunkKey& key) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Removes the entries `pred` (called with each Slot) selects, collecting
  // their waiters.
  template <typename Pred>
  void TakeEntriesLocked(Pred pred, std::vector<RecvCallback>* waiters) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool check_senders_;
  const size_t max_buffered_bytes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Slot, Entry> entries_ ABSL_GUARDED_BY(mu_);
  size_t buffered_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // sum of entries_' chunk sizes
  // The cluster's tasks, a handful: never pruned.
  absl::flat_hash_map<std::string, int32_t> sender_ids_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<CollectiveId, absl::Status> aborted_collectives_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, absl::Status> aborted_steps_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> aborted_all_ ABSL_GUARDED_BY(mu_);
};

}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_COLLECTIVE_MAILBOX_H_
