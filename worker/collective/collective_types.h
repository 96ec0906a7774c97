// The vocabulary shared by the collective engine, its mailbox and its
// transports: who takes part (CollectiveGroup), what one collective is
// (CollectiveParams) and how one chunk of it is named on the wire (ChunkKey).
//
// A group's ranks are 0..n-1, each a task with an address; every member of a
// group must be given the same members in the same order (the master sets
// them; tests and benchmarks construct them). A collective is identified by
// (group_key, instance_key, step_id); every rank must run the same
// collectives with the same keys, and no two collectives in flight may share
// all three.
//
// Thread-safety: plain values.
#ifndef WEFT_WORKER_COLLECTIVE_COLLECTIVE_TYPES_H_
#define WEFT_WORKER_COLLECTIVE_COLLECTIVE_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace weft {
namespace collective {

using StatusCallback = std::function<void(const absl::Status&)>;

struct CollectiveMember {
  std::string task;     // "/job:worker/task:1", used in error messages
  std::string address;  // "host:port" of its CollectiveService (gRPC only)
};

struct CollectiveGroup {
  int64_t group_key = 0;
  std::vector<CollectiveMember> members;  // index = rank
  int rank = 0;                           // this process's rank

  int size() const { return static_cast<int>(members.size()); }
  int next() const { return (rank + 1) % size(); }
  int prev() const { return (rank + size() - 1) % size(); }
  // "task /job:worker/task:1 (rank 1)"
  std::string Describe(int r) const;
};

inline constexpr size_t kDefaultChunkBytes = 1 << 20;

struct CollectiveParams {
  CollectiveGroup group;
  int64_t instance_key = 0;
  int64_t step_id = 0;
  // Each ring segment is cut into chunks of at most this many bytes (rounded
  // down to whole elements) so that sending one overlaps reducing another.
  size_t chunk_bytes = kDefaultChunkBytes;
  // The whole collective fails with DEADLINE_EXCEEDED, naming the peer it is
  // waiting for, when it has not finished by then.
  absl::Duration timeout = absl::Seconds(60);
};

// Names one chunk: the collective, the ring round, the chunk within the
// round's segment, and the rank that sends it.
struct ChunkKey {
  int64_t group_key = 0;
  int64_t instance_key = 0;
  int64_t step_id = 0;
  int32_t round = 0;
  int32_t chunk = 0;
  int32_t src_rank = 0;

  bool operator==(const ChunkKey& o) const {
    return group_key == o.group_key && instance_key == o.instance_key && step_id == o.step_id && round == o.round &&
           chunk == o.chunk && src_rank == o.src_rank;
  }
  bool SameCollective(const ChunkKey& o) const {
    return group_key == o.group_key && instance_key == o.instance_key && step_id == o.step_id;
  }
  template <typename H>
  friend H AbslHashValue(H h, const ChunkKey& k) {
    return H::combine(std::move(h), k.group_key, k.instance_key, k.step_id, k.round, k.chunk, k.src_rank);
  }
  std::string DebugString() const;
};

// A received chunk: its bytes as one or more pieces (however the transport
// split them; element boundaries may fall inside a piece or between two) and
// an owner that keeps the pieces alive (gRPC slices, a string, ...).
//
// A borrowed chunk (shared-memory rings) has no owner: its pieces point into
// memory the transport reuses as soon as the call that delivered it returns.
// Whoever keeps one longer copies it first (Owned()).
struct ReceivedChunk {
  absl::InlinedVector<absl::string_view, 4> pieces;
  std::shared_ptr<const void> owner;
  bool borrowed = false;

  // The same bytes in one buffer of its own (a copy), not borrowed.
  ReceivedChunk Owned() const;

  size_t size() const {
    size_t n = 0;
    for (absl::string_view p : pieces) n += p.size();
    return n;
  }
};

// Called once with the chunk, or with an error and an empty chunk. The
// pieces are valid until the callback returns unless it keeps `owner`.
using RecvCallback = std::function<void(const absl::Status&, ReceivedChunk)>;

}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_COLLECTIVE_TYPES_H_
