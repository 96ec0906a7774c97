// RemoteRendezvous: a step's rendezvous on a task that has peers.
//
// Send always stores the value in this task's table (the receiving task
// pulls it). RecvAsync looks at the key's send device: on this task (or with
// no job/task at all) it waits in the local table; on another task it pulls
// the value from that task through a TensorPullerInterface (a RecvTensor RPC
// for GrpcTensorPuller, a direct call for InProcessTensorPuller).
//
// StartAbort fails local waiters and in-flight pulls at once with the abort
// status and cancels the pulls; a pull that completes afterwards is dropped.
//
// The pulled step id: every iteration of a RunGraph shares the rendezvous of
// the request's step_id, and that is the step id a pull names; the key holds
// the iteration's own step id.
//
// Thread-safety: thread-safe.
#ifndef WEFT_WORKER_REMOTE_RENDEZVOUS_H_
#define WEFT_WORKER_REMOTE_RENDEZVOUS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "runtime/rendezvous.h"

namespace weft {
namespace worker {

// Fetches a tensor that another task sent.
//
// Thread-safety: implementations are thread-safe.
class TensorPullerInterface {
 public:
  virtual ~TensorPullerInterface() = default;

  // Pulls `key`, sent on `task` ("/job:ps/task:0") in the step whose
  // rendezvous is `step_id`; calls `done` exactly once, from any thread.
  // Returns a function that cancels the pull (its `done` then reports
  // CANCELLED soon); calling it after `done` is harmless.
  virtual std::function<void()> PullAsync(const std::string& task, int64_t step_id, const std::string& key,
                                          Rendezvous::DoneCallback done) = 0;
};

class RemoteRendezvous final : public Rendezvous, public std::enable_shared_from_this<RemoteRendezvous> {
 public:
  // `local_task`: this task's name, "/job:worker/task:0". `puller` may be
  // nullptr (no peers: a key sent elsewhere is FAILED_PRECONDITION); it must
  // outlive every pull, i.e. the worker's shutdown.
  static std::shared_ptr<RemoteRendezvous> Create(std::string local_task, int64_t step_id,
                                                  TensorPullerInterface* puller);

  absl::Status Send(const std::string& key, const Tensor& value, bool is_dead) override;
  void RecvAsync(const std::string& key, DoneCallback done) override;
  void RecvLocalAsync(const std::string& key, DoneCallback done) override;
  void StartAbort(const absl::Status& status) override;

  int NumPendingPulls() const;

 private:
  RemoteRendezvous(std::string local_task, int64_t step_id, TensorPullerInterface* puller)
      : local_task_(std::move(local_task)), step_id_(step_id), puller_(puller) {}

  struct Pull {
    DoneCallback done;
    std::function<void()> cancel;
  };
  void Pulled(uint64_t id, const absl::Status& s, const Tensor& value, bool is_dead);

  const std::string local_task_;
  const int64_t step_id_;
  TensorPullerInterface* const puller_;
  LocalRendezvous local_;

  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  uint64_t next_pull_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, Pull> pulls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace worker
}  // namespace weft

#endif  // WEFT_WORKER_REMOTE_RENDEZVOUS_H_
