// ShmCollectiveTransport: sends collective chunks to peers on the same host
// through shared-memory rings (common/shm_ring.h), and everything else
// through another transport (the gRPC one).
//
// Sending (ShmSender, one per peer). The first send to a peer creates a
// ring and offers it with CollectiveService.AttachShm over the cluster's
// authenticated channel (Options::offerer); the chunks sent meanwhile wait.
// When the peer accepts, chunks go into the ring:
// the sending thread copies the chunk in itself when there is room and
// nothing waits before it (one memcpy, no other thread, no system call
// unless the receiver sleeps), and a writer thread of the peer's takes over
// when the ring is full. When the peer refuses (another host, shared memory
// off there, an older weft) every chunk to it goes over the network for good;
// when the offer fails otherwise (the peer is not up yet), the waiting
// chunks go over the network and the offer is made again a second later. A
// chunk too large for the ring always takes the network. The receiver files
// chunks by key, so chunks that took different paths need no order.
// RecvTensor replies take the same rings (TrySendThroughRing), never the
// network fallback: their caller answers over gRPC instead. A reply over
// half a ring goes as consecutive parts, which the puller reassembles.
// RecvTensor requests take them too, when the peer has a ring to this
// process for the reply (worker/ring_pulls.h): the reader hands such a
// message to the request handler, under the ring's authenticated sender.
//
// Receiving. Attach (AttachShm's handler) opens a peer's ring and starts a
// reader thread that delivers each chunk to the mailbox as a borrowed chunk,
// under the identity the peer authenticated with, so a collective sums it
// straight out of shared memory.
//
// Failure. Both ends watch each other's process with a pidfd: when the peer
// exits, the writer fails every chunk queued for it with UNAVAILABLE naming
// the peer's task (as a broken gRPC stream does) and the next send offers a
// new ring (to the restarted task); the reader stops, and fails the
// RecvTensor replies still awaited from that peer (UNAVAILABLE). A ring a peer corrupts
// fails the same way with DATA_LOSS. A chunk over the mailbox's quota closes
// the ring, failing the sender's later chunks.
//
// Thread-safety: thread-safe. The network transport and mailbox (borrowed)
// outlive this; the destructor closes every ring, fails what is queued with
// CANCELLED and joins its threads.
#ifndef WEFT_WORKER_COLLECTIVE_SHM_COLLECTIVE_TRANSPORT_H_
#define WEFT_WORKER_COLLECTIVE_SHM_COLLECTIVE_TRANSPORT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/shm_ring.h"
#include "proto/collective_service.pb.h"
#include "worker/collective/collective_mailbox.h"
#include "worker/collective/collective_transport.h"
#include "worker/collective/shm_offer.h"
#include "worker/collective/shm_sender.h"

namespace weft {
namespace collective {

// This process's host as AttachShm compares it: the boot id and the network
// and pid namespaces (two network namespaces stand for two hosts, and a pid
// must name the same process on both sides).
std::string ShmHostId();

class ShmCollectiveTransport final : public CollectiveTransportInterface {
 public:
  struct Options {
    // Data bytes of each ring this process sends into (a power of two).
    size_t ring_bytes = size_t{8} << 20;
    // How long a waiting side spins before it sleeps.
    absl::Duration spin = absl::Microseconds(50);
    // Rings other processes may attach to this one at once.
    int max_incoming_rings = 64;
    // Makes the offers (GrpcShmOfferer over the cluster's channels).
    // Borrowed; outlives the transport.
    ShmOffererInterface* offerer = nullptr;
  };

  // `network`: for peers on other hosts. `mailbox`: where chunks from
  // incoming rings go.
  ShmCollectiveTransport(CollectiveTransportInterface* network, CollectiveMailbox* mailbox, Options options);
  ~ShmCollectiveTransport() override;
  ShmCollectiveTransport(const ShmCollectiveTransport&) = delete;

  // What serves a RecvTensor request that came through a ring: `sender`,
  // the authenticated peer (never empty); `key`, RecvTensorRequestChunkKey;
  // `request`, its bytes (at most kMaxRecvTensorRequestBytes). Runs on the
  // ring's reader thread, so it must not block.
  using RequestHandler =
      std::function<void(const std::string& sender, const ChunkKey& key, std::string request)>;
  // REQUIRES: before the first Attach (a ring with a request and no
  // handler is closed, failing the requester's sends).
  void SetRequestHandler(RequestHandler handler) { request_handler_ = std::move(handler); }
  // Whether a ring from task `task` is attached, its reader still runs and
  // a message has come through it: then that task's sender writes into it
  // (a ring attached here before its sender has heard so carries nothing,
  // and a reply the sender cannot put into a ring is lost), and stops only
  // when the ring closes, which the reader sees.
  bool HasRingFrom(const std::string& task) const;
  ShmCollectiveTransport& operator=(const ShmCollectiveTransport&) = delete;

  void SendAsync(const CollectiveGroup& group, int dst, const ChunkKey& key, SendChunk chunk,
                 StatusCallback done) override;

  // ShmSender::TrySend to the task `task` serving `address` (its sender is
  // made, and a ring offered, on first use). For RecvTensor replies: the
  // caller answers over gRPC when this returns false.
  bool TrySendThroughRing(const std::string& address, const std::string& task, const ChunkKey& key, SendChunk chunk,
                          StatusCallback& done);

  // AttachShm's handler. FAILED_PRECONDITION for another host or a sender
  // that is gone, RESOURCE_EXHAUSTED beyond max_incoming_rings, the ring's
  // own checks' errors otherwise.
  absl::StatusOr<AttachShmResponse> Attach(const std::string& caller, const AttachShmRequest& request);

  // For tests and the bench: peers whose chunks go through a ring now, and
  // rings attached to this process whose readers still run.
  int NumShmPeers() const;
  int NumIncomingRings() const;

 private:
  struct InRing;

  std::shared_ptr<ShmSender> PeerFor(const std::string& address, const std::string& task,
                                     const std::string& describe);
  void ReadLoop(InRing* in);
  // A request message (RecvTensorRequestChunkKey) from `in`'s sender; an
  // error closes the ring.
  absl::Status HandleRequest(const InRing& in, const ChunkKey& key, const ShmRing::Message& message);

  CollectiveMailbox* const mailbox_;
  const Options options_;
  const std::string host_id_;
  ShmSender::Context context_;  // the senders' (set once)
  RequestHandler request_handler_;  // set once, before any reader runs

  mutable absl::Mutex mu_;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::shared_ptr<ShmSender>> peers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<InRing>> incoming_ ABSL_GUARDED_BY(mu_);
};

}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_SHM_COLLECTIVE_TRANSPORT_H_
