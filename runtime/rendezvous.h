// Rendezvous: where a _Send leaves a tensor and the matching _Recv picks it up.
//
// A rendezvous belongs to one step (one RunGraph: all its iterations share
// it, and the keys tell the iterations apart, since every key ends in the
// iteration's step id; see RendezvousKey in graph/partition.h). Each key
// carries exactly one value: Send and RecvAsync may come in either order, and
// the second of the two completes the exchange and removes the key. A second
// Send, or a second RecvAsync, while the key is still pending is an error
// (ALREADY_EXISTS).
//
// StartAbort(status) fails every pending RecvAsync with `status` and makes
// every later Send and RecvAsync fail with it too, so no receiver waits for a
// value that will never come. The first abort's status wins.
//
// RendezvousMgr hands out the rendezvous of a step, creating it on first use
// (a peer's RecvTensor may arrive before this task's RunGraph), and drops it
// on Cleanup.
//
// Callbacks run on the thread that completes the exchange (the sender's, the
// receiver's, or the aborter's), never under the rendezvous's lock; they must
// not block.
//
// Values are host tensors: a GPU's _Send copies to (pinned) host memory
// before it sends, and a GPU's _Recv copies to the device, so CPU consumers
// and RecvTensor replies read every payload directly. Sending a device
// tensor is INTERNAL.
//
// Thread-safety: every class here is thread-safe.
#ifndef WEFT_RUNTIME_RENDEZVOUS_H_
#define WEFT_RUNTIME_RENDEZVOUS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tensor.h"

namespace weft {

class Rendezvous {
 public:
  // `value` is meaningful only when the status is OK.
  using DoneCallback = std::function<void(const absl::Status& status, const Tensor& value, bool is_dead)>;

  virtual ~Rendezvous() = default;

  // Makes `value` available under `key`. Fails with the abort status after
  // StartAbort, or ALREADY_EXISTS when `key` already holds a value.
  virtual absl::Status Send(const std::string& key, const Tensor& value, bool is_dead) = 0;
  // Calls `done` exactly once: with the value once it is sent, or with the
  // abort status.
  virtual void RecvAsync(const std::string& key, DoneCallback done) = 0;
  // REQUIRES: !status.ok().
  virtual void StartAbort(const absl::Status& status) = 0;
  // RecvAsync from this task's own table only, never pulling from a peer:
  // what a task uses to serve a peer's RecvTensor. The same as RecvAsync for
  // a rendezvous that has no peers.
  virtual void RecvLocalAsync(const std::string& key, DoneCallback done) { RecvAsync(key, std::move(done)); }

  // RecvAsync, blocking the caller until `done` would run.
  absl::Status Recv(const std::string& key, Tensor* value, bool* is_dead);
};

// The in-process table. Never talks to another task.
class LocalRendezvous final : public Rendezvous {
 public:
  LocalRendezvous() = default;
  ~LocalRendezvous() override;  // fails pending receivers with CANCELLED

  absl::Status Send(const std::string& key, const Tensor& value, bool is_dead) override;
  void RecvAsync(const std::string& key, DoneCallback done) override;
  void StartAbort(const absl::Status& status) override;

  // OK, or the abort status.
  absl::Status status() const;
  // Keys holding a value or a waiting receiver (for tests and leak checks).
  int NumPending() const;
  // Blocks until at least `n` receivers wait for their values, or `timeout`
  // passes; true when they do. For tests that must send only after a
  // receiver is known to wait, without sleeping.
  bool AwaitWaitingReceivers(int n, absl::Duration timeout) const;

 private:
  // Either a value waiting for its receiver or a receiver waiting for its
  // value, never both.
  struct Item {
    bool has_value = false;
    Tensor value;
    bool is_dead = false;
    DoneCallback waiter;
  };

  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Item> table_ ABSL_GUARDED_BY(mu_);
};

// The parts of a rendezvous key
// "send_device;incarnation;recv_device;tensor_name;step_id".
struct ParsedRendezvousKey {
  std::string send_device;
  uint64_t incarnation = 0;
  std::string recv_device;
  std::string tensor_name;
  int64_t step_id = 0;
};
// INVALID_ARGUMENT naming `key` when it is not in that form.
absl::StatusOr<ParsedRendezvousKey> ParseRendezvousKey(absl::string_view key);

// The rendezvous of every live step on this task.
//
// Steps are created by this task's RunGraph (Find: the step is "claimed")
// or ahead of it by a peer's RecvTensor or the master's AbortStep
// (FindForPeer, AbortStep: "unclaimed"). Unclaimed steps are what a caller
// can create for any step id, so they are bounded: one left unclaimed for
// `unclaimed_ttl` is aborted (DEADLINE_EXCEEDED, waking a RecvTensor that
// waits in it) and forgotten, and when the table holds `max_steps` an
// aborted unclaimed step (a tombstone AbortStep left) makes room first. A new
// step beyond that gets a rendezvous already aborted with RESOURCE_EXHAUSTED
// naming the quota (--max_live_steps), and the steps already live are left
// alone.
struct RendezvousLimits {
  // Steps held at once (--max_live_steps).
  int max_steps = 4096;
  // How long a step that only peers or aborts created waits for its
  // RunGraph before it is aborted and forgotten.
  absl::Duration unclaimed_ttl = absl::Minutes(5);
};

class RendezvousMgr {
 public:
  using Factory = std::function<std::shared_ptr<Rendezvous>(int64_t step_id)>;
  using Limits = RendezvousLimits;

  // `factory` makes a step's rendezvous; the default makes a LocalRendezvous.
  explicit RendezvousMgr(Factory factory = nullptr, Limits limits = Limits());
  ~RendezvousMgr();  // aborts what is left with CANCELLED

  // The step's rendezvous, created on first use, for this task's own
  // RunGraph (claims it). Shared: a kernel, a RunGraph and in-flight
  // RecvTensor RPCs may each hold it past Cleanup. After AbortAll, new steps
  // get a rendezvous already aborted with that status.
  std::shared_ptr<Rendezvous> Find(int64_t step_id);
  // The same for a peer's RecvTensor: a step it creates stays unclaimed.
  std::shared_ptr<Rendezvous> FindForPeer(int64_t step_id);
  // Aborts the step's rendezvous (creating it unclaimed, so that a RunGraph
  // or a RecvTensor arriving later fails at once instead of waiting).
  // REQUIRES: !status.ok().
  void AbortStep(int64_t step_id, const absl::Status& status);
  // Forgets the step, failing its pending receivers with CANCELLED.
  void Cleanup(int64_t step_id);
  // Aborts every step, now and from now on (for shutdown).
  // REQUIRES: !status.ok().
  void AbortAll(const absl::Status& status);

  int NumSteps() const;

  // For tests: the clock that ages unclaimed steps.
  void SetClockForTest(std::function<absl::Time()> now) { now_ = std::move(now); }

 private:
  struct Step {
    std::shared_ptr<Rendezvous> rendezvous;
    bool claimed = false;
    bool aborted = false;
    absl::Time created;
  };
  using Aborts = std::vector<std::pair<std::shared_ptr<Rendezvous>, absl::Status>>;

  // Find and FindForPeer; `aborts` are run by the caller outside the lock.
  std::shared_ptr<Rendezvous> FindOrCreate(int64_t step_id, bool claim, bool mark_aborted);
  std::shared_ptr<Rendezvous> CreateLocked(int64_t step_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops unclaimed steps past their time, and with `need_room` also the
  // aborted unclaimed ones, adding them to `aborts`.
  void EvictLocked(absl::Time now, bool need_room, Aborts* aborts) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Factory factory_;
  const Limits limits_;
  std::function<absl::Time()> now_ = [] { return absl::Now(); };
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, Step> steps_ ABSL_GUARDED_BY(mu_);
  absl::Time next_sweep_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Status abort_all_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft

#endif  // WEFT_RUNTIME_RENDEZVOUS_H_
