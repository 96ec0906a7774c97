// How a shared-memory ring is offered to a peer, and how a ring message's
// tag names a collective chunk: the vocabulary ShmSender (the sending end)
// and ShmCollectiveTransport (the receiving end) share, free of gRPC. The
// offer travels as CollectiveService.AttachShm; GrpcShmOfferer is the
// adapter that makes the call.
//
// Thread-safety: implementations are thread-safe; the functions are pure.
#ifndef WEFT_WORKER_COLLECTIVE_SHM_OFFER_H_
#define WEFT_WORKER_COLLECTIVE_SHM_OFFER_H_

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/shm_ring.h"
#include "proto/collective_service.pb.h"
#include "worker/collective/collective_transport.h"
#include "worker/collective/collective_types.h"

namespace weft {
namespace collective {

class ShmOffererInterface {
 public:
  virtual ~ShmOffererInterface() = default;
  // Offers the ring described by `request` to the task serving `address`,
  // waiting for it to come up for at most `timeout`. `done` runs once, with
  // the peer's answer or the call's error. Returns a function that cancels
  // the offer (`done` still runs).
  virtual std::function<void()> OfferAsync(const std::string& address, const AttachShmRequest& request,
                                           absl::Duration timeout,
                                           std::function<void(absl::StatusOr<AttachShmResponse>)> done) = 0;
};

// RecvTensor replies through the rings (WorkerService.RecvTensor with
// shm_pull_id): the reply to pull `pull_id` of RunGraph step `step_id` is
// the chunk under this key, its bytes the reply's header and payload. No
// collective has this group key (the master's are positive).
inline constexpr int64_t kRecvTensorGroupKey = -1;
inline ChunkKey RecvTensorChunkKey(uint64_t pull_id, int64_t step_id) {
  return ChunkKey{kRecvTensorGroupKey, static_cast<int64_t>(pull_id), step_id, 0, 0, 0};
}
// A RecvTensor request through a ring (worker/ring_pulls.h): the message
// under this key is a serialized RecvTensorRequest for that pull, and the
// reply comes under RecvTensorChunkKey. The receiving end hands it to its
// request handler, never to the mailbox.
inline constexpr int64_t kRecvTensorRequestGroupKey = -2;
inline ChunkKey RecvTensorRequestChunkKey(uint64_t pull_id, int64_t step_id) {
  return ChunkKey{kRecvTensorRequestGroupKey, static_cast<int64_t>(pull_id), step_id, 0, 0, 0};
}
// Requests larger than this are a peer's garbage (a real one is ~100 bytes).
inline constexpr size_t kMaxRecvTensorRequestBytes = 16 << 10;

// A chunk's key as a ring message's tag, and back.
ShmRing::Tag EncodeChunkTag(const ChunkKey& key);
ChunkKey DecodeChunkTag(const ShmRing::Tag& tag);

// A message larger than a ring takes (a RecvTensor reply over half the
// ring) goes as consecutive parts of at most `max_part` bytes each, under
// `key` with chunk = 0, 1, 2, ...; the first part holds the whole prefix.
// The receiver asks for part i + 1 once it has part i, and knows from the
// prefix (the reply's header) how many bytes are still to come. One part,
// `key` unchanged, when the message fits.
// REQUIRES: chunk.prefix.size() < max_part.
struct MessagePart {
  ChunkKey key;
  SendChunk chunk;  // pins the message's tensor
};
std::vector<MessagePart> SplitMessage(const ChunkKey& key, SendChunk chunk, size_t max_part);

// `n` callbacks that together run `done` once, after the last of them has
// run, with the first error any of them saw (OK when none did).
std::vector<StatusCallback> JoinCallbacks(size_t n, StatusCallback done);

}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_SHM_OFFER_H_
