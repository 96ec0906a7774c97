// CollectiveExecutor: runs ring all-reduces (sum) over a transport, in place
// in the caller's tensor. The engine of the MULTI_WORKER_MIRRORED strategy.
//
// Algorithm. The tensor is cut into n segments (sizes differ by at most one
// element; some are empty when it has fewer than n elements). Over 2(n-1)
// rounds, rank r sends segment (r - t) mod n to its next rank and receives
// segment (r - t - 1) mod n from its previous one: summing it in during the
// first n-1 rounds (reduce-scatter), copying it during the rest (all-gather).
// Each segment is cut further into chunks of CollectiveParams::chunk_bytes,
// and each chunk moves on by itself: chunk c received in round t is summed
// and sent on as chunk c of round t+1 at once, so sending one chunk overlaps
// receiving and summing the next. Every send is a slice of the caller's
// buffer (no copy); every receive is summed straight from the transport's
// pieces. n == 1 and empty tensors finish at once.
//
// Failure. A collective fails with the first error (a send the transport
// could not make, a chunk of the wrong size, an abort), with
// DEADLINE_EXCEEDED naming the peer it still waits for once
// CollectiveParams::timeout has passed, or with the status given to
// Abort/AbortStep. It never hangs. On failure its receives are withdrawn from
// the mailbox (CollectiveMailbox::AbortCollective) and `done` runs once no
// reduction is still writing into the tensor, whose contents are then
// unspecified.
//
// Threads. Receives complete on the transport's threads; the reductions they
// trigger run there too (summing a chunk is CPU work that never blocks, and a
// hand-off to another thread costs a wake-up per chunk and round), or on
// `Options::compute_pool` when one is given. A deadline thread of its own
// fails collectives that run out of time; it is woken only when a collective
// has an earlier deadline than it sleeps until.
//
// Thread-safety: thread-safe. The transport, mailbox and pool (borrowed)
// outlive the executor; the destructor aborts what is in flight with
// CANCELLED and returns once every collective has called its `done`.
#ifndef WEFT_WORKER_COLLECTIVE_COLLECTIVE_EXECUTOR_H_
#define WEFT_WORKER_COLLECTIVE_COLLECTIVE_EXECUTOR_H_

#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tensor.h"
#include "common/thread_pool.h"
#include "runtime/collective_runtime.h"
#include "worker/collective/collective_mailbox.h"
#include "worker/collective/collective_transport.h"
#include "worker/collective/collective_types.h"

namespace weft {
namespace collective {

class CollectiveExecutor {
 public:
  struct Options {
    // Runs the reductions; nullptr (what WorkerCollectives uses) runs them on
    // the thread that received the chunk. Borrowed.
    ThreadPool* compute_pool = nullptr;
  };

  CollectiveExecutor(CollectiveTransportInterface* transport, CollectiveMailbox* mailbox, Options options);
  ~CollectiveExecutor();
  CollectiveExecutor(const CollectiveExecutor&) = delete;
  CollectiveExecutor& operator=(const CollectiveExecutor&) = delete;

  // Sums `*in_out` over the group's ranks, leaving the sum in `*in_out` on
  // every rank; `done` runs once. Every rank must call it with the same
  // params (but its own rank), dtype and element count. The caller must not
  // touch the buffer of `*in_out` until `done`; the tensor object itself may
  // go away earlier (the collective holds its own reference).
  // INVALID_ARGUMENT for an uninitialised tensor, a dtype that cannot be
  // summed or a malformed group.
  void AllReduceAsync(const CollectiveParams& params, Tensor* in_out, StatusCallback done);
  // AllReduceAsync and wait.
  absl::Status AllReduce(const CollectiveParams& params, Tensor* in_out);

  // Fails every collective in flight, and every later one until Reset, with
  // `status` (REQUIRES: not OK), waking their waits at once.
  void Abort(const absl::Status& status);
  void Reset();
  // Fails the collectives of `step_id`, now and until CleanupStep(step_id).
  void AbortStep(int64_t step_id, const absl::Status& status);
  // Forgets the step: drops chunks that arrived for it and its aborts.
  void CleanupStep(int64_t step_id);

  CollectiveMailbox* mailbox() const { return mailbox_; }

  // The collectives in flight and whom each waits for (diagnosis).
  std::vector<CollectiveWait> Pending();

 private:
  class RingAllReduce;
  friend class RingAllReduce;

  // Tracks a running collective for aborts and its deadline.
  void Register(const std::shared_ptr<RingAllReduce>& op, absl::Time deadline);
  void Unregister(RingAllReduce* op);
  void DeadlineLoop();

  CollectiveTransportInterface* const transport_;
  CollectiveMailbox* const mailbox_;
  const Options options_;

  struct InFlight {
    std::shared_ptr<RingAllReduce> op;
    std::multimap<absl::Time, RingAllReduce*>::iterator deadline;
  };
  absl::Mutex mu_;
  absl::flat_hash_map<RingAllReduce*, InFlight> in_flight_ ABSL_GUARDED_BY(mu_);
  std::multimap<absl::Time, RingAllReduce*> deadlines_ ABSL_GUARDED_BY(mu_);
  absl::CondVar deadline_changed_;  // a deadline before waiting_until_, or stopping_
  // When the deadline thread will wake by itself: InfiniteFuture while it
  // waits for the first deadline, InfinitePast while it is not waiting.
  absl::Time waiting_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread deadline_thread_;
};

}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_COLLECTIVE_EXECUTOR_H_
