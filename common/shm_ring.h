// ShmRing: a one-way, single-producer single-consumer queue of messages in
// memory shared by two processes on one host, with futex wake-ups.
//
// The producer creates it (Create): an anonymous, sealed memfd holding a
// control block and `capacity` bytes of data. Nothing is ever named in
// /dev/shm, so a process killed at any moment leaves nothing behind: the
// kernel frees the memory when the last mapping and descriptor go. The
// consumer opens the same memfd through /proc/<producer pid>/fd (Open), which
// the kernel allows only to a process of the same user; it checks the
// memfd's size, seals and a 16-byte random nonce against what the producer
// told it over an authenticated channel.
//
// Messages: a 64-byte header (a 48-byte tag the caller defines, and the
// payload's length) followed by the payload, padded to 64 bytes. A header
// never wraps; a payload may, so a received message is one or two pieces.
// A message takes at most capacity / 2 bytes (MaxPayload).
//
// Waiting: either side spins for a while checking the other's progress, then
// announces in the control block that it sleeps and sleeps on a futex word
// there (a process-shared futex). The other side wakes the futex only when a
// sleeper is announced, so a busy ring makes no system calls at all. A
// sleeper also wakes every kPollInterval to see whether the peer process
// still exists (a pidfd): a peer killed mid-transfer is noticed within that.
//
// Trust: the peer can write the shared memory at any time. Every value read
// from it (positions, lengths, the header) is copied once and checked before
// use; a bad one fails the ring with DATA_LOSS. A peer can still change
// payload bytes while they are read, which gives wrong numbers but never
// reads or writes outside the mapping. Sealing (no shrink, no grow) keeps a
// peer from truncating the memfd under the mapping, which would raise
// SIGBUS here.
//
// Either side may Close: the ring is then dead for both (the other side sees
// it at its next call and when woken).
//
// Thread-safety: one producer thread and one consumer thread at a time (the
// caller serialises each side); Close and the accessors from any thread.
#ifndef WEFT_COMMON_SHM_RING_H_
#define WEFT_COMMON_SHM_RING_H_

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace weft {

class ShmRing {
 public:
  static constexpr size_t kHeaderBytes = 64;
  static constexpr size_t kTagBytes = 48;
  static constexpr size_t kMinCapacity = size_t{64} << 10;
  static constexpr size_t kMaxCapacity = size_t{256} << 20;
  using Tag = std::array<char, kTagBytes>;
  using Nonce = std::array<uint8_t, 16>;

  static constexpr absl::Duration kPollInterval = absl::Milliseconds(50);

  // What the consumer needs to open a ring (sent over an authenticated
  // channel).
  struct Handle {
    pid_t pid = 0;
    int memfd = -1;
    size_t capacity = 0;
    Nonce nonce{};
  };

  enum class WaitResult { kReady, kClosed, kPeerGone, kTimeout };

  // A message at the consumer, valid until Release.
  struct Message {
    Tag tag{};
    size_t payload_bytes = 0;
    absl::InlinedVector<absl::string_view, 2> pieces;  // the payload, in shared memory
  };

  // A power of two in [kMinCapacity, kMaxCapacity].
  static absl::StatusOr<std::unique_ptr<ShmRing>> Create(size_t capacity);
  // The consumer's end. `peer` names the producer in errors.
  static absl::StatusOr<std::unique_ptr<ShmRing>> Open(const Handle& handle, absl::string_view peer);
  ~ShmRing();
  ShmRing(const ShmRing&) = delete;
  ShmRing& operator=(const ShmRing&) = delete;

  // Producer's end only: what to send the consumer.
  const Handle& handle() const { return handle_; }
  size_t capacity() const { return capacity_; }
  size_t MaxPayload() const { return capacity_ / 2 - kHeaderBytes; }

  // Producer. Writes one message if it fits now: true when written, false
  // when the ring lacks room (the caller waits with WaitForSpace). Errors:
  // FAILED_PRECONDITION when the ring is closed, INVALID_ARGUMENT when the
  // payload is over MaxPayload, DATA_LOSS when the consumer corrupted the
  // control block.
  absl::StatusOr<bool> TryWrite(const Tag& tag, const char* data, size_t bytes) {
    return TryWrite(tag, absl::string_view(), data, bytes);
  }
  // The same with the payload made of `prefix` followed by `bytes` at `data`.
  absl::StatusOr<bool> TryWrite(const Tag& tag, absl::string_view prefix, const char* data, size_t bytes);
  // Consumer. The oldest unreleased message, if any (false: empty). Errors
  // as TryWrite's.
  absl::StatusOr<bool> Peek(Message* message);
  // Consumer. Frees the message Peek returned, waking a producer that sleeps.
  void Release(const Message& message);

  // Waits until TryWrite of `bytes` could succeed (producer) or a message is
  // there (consumer), the ring closes, the process of `peer_pidfd` (-1: not
  // watched) exits, or `timeout` passes; spins for `spin` first.
  WaitResult WaitForSpace(size_t bytes, int peer_pidfd, absl::Duration spin, absl::Duration timeout);
  WaitResult WaitForData(int peer_pidfd, absl::Duration spin, absl::Duration timeout);

  // A pidfd of `pid` (-1 when it cannot be opened: the process is gone or
  // in another pid namespace), and whether such a process has exited.
  static int OpenPidfd(pid_t pid);
  static bool ProcessExited(int pidfd);

  // Marks the ring dead for both ends and wakes both.
  void Close();
  bool closed() const;

 private:
  struct Control;
  ShmRing() = default;
  WaitResult Wait(bool producer, size_t bytes, int peer_pidfd, absl::Duration spin, absl::Duration timeout);
  // Whether the side can go on: room for `bytes` (producer) or a message
  // (consumer), or the ring closed.
  bool Ready(bool producer, size_t bytes) const;

  Handle handle_;
  size_t capacity_ = 0;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  Control* control_ = nullptr;
  char* data_ = nullptr;
  // This side's view of the positions: the one it owns, exact; the other's,
  // as last read and checked.
  uint64_t head_ = 0;
  uint64_t tail_ = 0;
};

}  // namespace weft

#endif  // WEFT_COMMON_SHM_RING_H_
