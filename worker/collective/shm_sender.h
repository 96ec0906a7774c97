// ShmSender: the sending end of shared memory for one destination task.
// ShmCollectiveTransport keeps one per peer address (its header tells the
// whole story: offers, the inline copy, the writer thread, fallbacks and
// failures).
//
// States: new -> offering (chunks wait) -> through the ring, or over the
// network (for good when the peer refused, for a second when the offer
// failed otherwise). A ring whose reader exited or that broke goes back to
// new: what waited for it fails, and the next chunk makes a new offer.
//
// Thread-safety: thread-safe. `Stop` before the last reference goes; the
// context outlives every sender.
#ifndef WEFT_WORKER_COLLECTIVE_SHM_SENDER_H_
#define WEFT_WORKER_COLLECTIVE_SHM_SENDER_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "worker/collective/collective_transport.h"
#include "worker/collective/shm_offer.h"

namespace weft {
namespace collective {

class ShmSender {
 public:
  // What every sender of a process shares (borrowed).
  struct Context {
    CollectiveTransportInterface* network = nullptr;  // peers that refuse, chunks too large
    ShmOffererInterface* offerer = nullptr;
    size_t ring_bytes = 0;
    absl::Duration spin;
    std::string host_id;  // ShmHostId()
  };

  // `describe`: the peer in messages, "task /job:worker/task:1 (rank 1)".
  static std::shared_ptr<ShmSender> Create(const Context* context, std::string address, const std::string& task,
                                           std::string describe);
  virtual ~ShmSender() = default;

  // CollectiveTransportInterface::SendAsync, for this destination.
  virtual void Send(const CollectiveGroup& group, int dst, const ChunkKey& key, SendChunk chunk,
                    StatusCallback done) = 0;
  // Puts `chunk` (prefix included) into the ring if this destination is
  // on shared memory now, taking `done` (which then runs once, OK when the
  // bytes are in the ring, an error when the ring broke first). A chunk over
  // the ring's largest message goes as parts (SplitMessage, shm_offer.h).
  // False, with `done` untouched, when it is not (no ring yet, refused, a
  // prefix too large): the caller sends another way. A destination never
  // offered a ring gets an offer, for the sends after this one.
  virtual bool TrySend(const ChunkKey& key, SendChunk chunk, StatusCallback& done) = 0;
  // Fails what waits with CANCELLED, cancels an offer in flight, closes the
  // ring and joins the writer thread.
  virtual void Stop() = 0;
  // Whether chunks go through a ring now.
  virtual bool on_shm() const = 0;
};

}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_SHM_SENDER_H_
