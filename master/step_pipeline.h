// StepPipeline: dispatches of one signature through a MasterSession with up
// to `depth` of them in flight (MasterSession::RunAsync's after_previous).
// Every task queues the next dispatch behind the one it runs and starts it
// the moment that one ends, so no task idles for the master's round trip
// between steps, while each step still runs after the one before it on
// every task, as one at a time would. A dispatch that fails makes the
// session abort the ones behind it.
//
// Issue starts a dispatch; Take waits for the oldest one and hands out its
// result, so results come in issue order. WaitAll waits for every dispatch
// in flight, keeping their results for Take: then nothing runs, and the
// caller may checkpoint.
//
// Thread-safety: one thread calls the methods; the session's threads only
// deliver results.
#ifndef WEFT_MASTER_STEP_PIPELINE_H_
#define WEFT_MASTER_STEP_PIPELINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tensor.h"
#include "master/master_session.h"

namespace weft {
namespace master {

// steps_per_execution 0: how many steps the next dispatch runs,
// from the time per step measured so far: as many as take about kTarget
// (1 to kMaxSteps), 1 until a step has been timed. Long enough that the
// master's dispatch costs the tasks little; short enough that a SIGTERM or
// a cancel is seen within a few dispatches. Keras 3's
// steps_per_execution="auto" tunes the same knob.
class AutoStepsPerDispatch {
 public:
  static constexpr absl::Duration kTarget = absl::Milliseconds(20);
  static constexpr int64_t kMaxSteps = 64;
  int64_t Next() const;
  // A dispatch of `steps`, issued at `issued`, ended at `now`.
  void Ended(int64_t steps, absl::Time issued, absl::Time now);

 private:
  double step_seconds_ = 0;  // smoothed; 0 until measured
  absl::Time last_end_ = absl::InfinitePast();
};

class StepPipeline {
 public:
  // `session` outlives the pipeline; `depth` >= 1 (1: one dispatch at a
  // time, not pipelined).
  StepPipeline(MasterSession* session, std::vector<std::string> fetches, std::vector<std::string> targets,
               int depth);
  ~StepPipeline();  // WaitAll

  struct Result {
    absl::Status status;
    int iterations = 0;
    std::vector<Tensor> fetched;
    absl::Time issued;  // when Issue started it
  };

  // Starts a dispatch of `iterations` steps. False when its plan is not
  // built yet (the signature's first dispatch, or the first after a task
  // restarted): nothing started; run it through MasterSession::Run, which
  // registers it, once nothing is in flight.
  // REQUIRES: pending() < depth().
  bool Issue(int iterations);
  // The oldest dispatch's result, once it has ended. REQUIRES: pending() > 0.
  Result Take();
  // Waits for every dispatch in flight to end; their results stay for Take.
  // Returns the first failure among the results not taken.
  absl::Status WaitAll();

  // Dispatches issued and not taken, and their steps.
  int pending() const { return issued_ - taken_; }
  int64_t pending_steps() const { return pending_steps_; }
  int depth() const { return depth_; }

 private:
  struct Slot {
    bool ended = false;
    int iterations = 0;
    absl::Time issued;
    absl::Status status;
    std::vector<Tensor> fetched;
  };

  MasterSession* const session_;
  const std::vector<std::string> fetches_;
  const std::vector<std::string> targets_;
  const int depth_;
  int64_t issued_ = 0, taken_ = 0;  // dispatch k uses slot k % depth
  int64_t pending_steps_ = 0;
  absl::Mutex mu_;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_STEP_PIPELINE_H_
