// The master's drivers for replicas that step on their own: asynchronous
// PARAMETER_SERVER replicas, and sync PARAMETER_SERVER replicas that
// aggregate the first k of N on the ps (replicas_to_aggregate). Each runs one
// thread per replica, dispatching the replica's steps through the job's
// MasterSession, and hands the training loop (runtime/training_loop.h) the
// results as StepResults. JobRunner owns them for one attempt of a job.
//
// Thread-safety: Next and Quiesce are called from the training loop's
// thread; the replicas' threads are internal.
#ifndef WEFT_MASTER_REPLICA_DRIVERS_H_
#define WEFT_MASTER_REPLICA_DRIVERS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "master/master_session.h"
#include "master/step_pipeline.h"
#include "master/strategy.h"
#include "runtime/training_loop.h"

namespace weft {
namespace master {

// Asynchronous replicas: one thread per replica runs its steps back to
// back until `total_steps` have been taken between them; Next hands the
// training loop their results in the order they finish.
class AsyncReplicas {
 public:
  // Each replica runs up to `steps_per_call` steps per dispatch
  // (steps_per_execution; 0: as many as AutoStepsPerDispatch says).
  // `recover` (may be null) decides whether a replica whose step failed
  // goes on (JobRunner::RecoverReplica); its steps return to the pool.
  AsyncReplicas(MasterSession* session, const ReplicatedGraph& rg, const std::vector<std::string>& tasks,
                int64_t total_steps, int64_t step_examples, int64_t steps_per_call,
                const std::atomic<bool>* cancelled,
                std::function<bool(const absl::Status&, const std::string& task)> recover);
  ~AsyncReplicas();  // stops handing out steps and joins the threads
  // The next finished steps, at most `max_steps` of them: a dispatch of
  // more is handed out in parts (all with its loss).
  absl::StatusOr<StepResult> Next(int64_t max_steps);
  // Holds new steps back, waits for the running ones, and runs `fn` with
  // the steps completed so far (for a checkpoint), then lets them go on.
  absl::Status Quiesce(const std::function<absl::Status(int64_t completed)>& fn);
  // Whether new steps are held back now (a Quiesce is under way), so that a
  // test can act once they are.
  bool holding() const;

 private:
  void Loop(const ReplicaNames& names, const std::string& task);
  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  MasterSession* const session_;
  const int64_t total_;
  const int64_t step_examples_;
  const int64_t steps_per_call_;
  const std::atomic<bool>* const cancelled_;
  const std::function<bool(const absl::Status&, const std::string&)> recover_;
  mutable absl::Mutex mu_;
  int64_t remaining_ ABSL_GUARDED_BY(mu_);
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<absl::StatusOr<StepResult>> done_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

// Sync PS replicas that aggregate the first k of N on the ps
// (replicas_to_aggregate): one thread per replica runs its steps back to
// back, like AsyncReplicas, but a step of the job is a global step: one
// apply of every update, seen in the pushes' outcomes. Next hands the
// training loop one result per global step; after `total_steps` of them
// no replica starts another step.
class AccumulatingReplicas {
 public:
  AccumulatingReplicas(MasterSession* session, const ReplicatedGraph& rg, int64_t total_steps,
                       int64_t step_examples, const std::atomic<bool>* cancelled);
  // Stops the replicas, aborting the steps still parked on the ps (their
  // gradients are not applied), and joins the threads.
  ~AccumulatingReplicas();
  absl::StatusOr<StepResult> Next();
  // Stale gradients the ps refused so far: one per variable pushed late,
  // and the replica steps that had any refused.
  int64_t refused() const;
  int64_t refused_steps() const;
  // Holds new replica steps back, aborts the ones parked on the ps (their
  // gradients are taken back out of the sums, not applied), waits for all
  // to return, and runs `fn` with the global steps applied so far, then
  // lets the replicas go on. A variable whose k-th push of the next global
  // step came in before the abort holds that step already: the state is
  // within one global step per variable, as k-of-N training allows.
  absl::Status Quiesce(const std::function<absl::Status(int64_t completed)>& fn);

 private:
  void Loop(const ReplicaNames& names);
  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return active_ == 0; }
  // Aborts the session's running steps with `why` until no replica is in
  // one. A push parked for pushes that no replica will make is only freed
  // by an abort, and a replica between its check of the flags and its
  // RunGraph can miss one abort, hence the repeats. REQUIRES: stopping_ or
  // paused_ is set, so that no replica starts another step.
  void AbortUntilIdle(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  bool paused_ ABSL_GUARDED_BY(mu_) = false;

  MasterSession* const session_;
  const int64_t total_;
  const int64_t step_examples_;
  const std::atomic<bool>* const cancelled_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> applies_ ABSL_GUARDED_BY(mu_);  // per update: the pushes that applied a step
  int64_t global_steps_ ABSL_GUARDED_BY(mu_) = 0;      // handed to the loop
  double loss_sum_ ABSL_GUARDED_BY(mu_) = 0;          // accepted replica steps since the last global step
  int64_t losses_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refused_steps_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<absl::StatusOr<StepResult>> done_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_REPLICA_DRIVERS_H_
