// StepObserver: what a MasterSession tells about its steps as they run, for
// whoever times them and watches for hangs (master/step_watch.h).
//
// StepStarted runs on the thread that starts the step (MasterSession::Run or
// RunAsync), RunGraphDone on whichever thread completes a task's RunGraph (an
// RPC thread), and StepEnded on the thread of the step's last answer: an
// implementation must return at once, never blocking, and allocate nothing
// in steady state.
//
// Thread-safety: implementations are thread-safe; concurrent Runs report
// concurrently.
#ifndef WEFT_MASTER_STEP_OBSERVER_H_
#define WEFT_MASTER_STEP_OBSERVER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace weft {
namespace master {

class StepObserver {
 public:
  struct StepInfo {
    int64_t step_id = 0;  // the session's; iterations use step_id + i
    int iterations = 1;
    // The step runs targets (a training step), not only fetches (an
    // evaluation).
    bool trains = false;
    // The step's tasks; valid until StepEnded returns.
    const std::vector<std::string>* tasks = nullptr;
    absl::Time start;
    // A pipelined step (MasterSession::RunAsync's after_previous): it runs
    // on each task once this step has ended there; 0: it runs at once.
    int64_t after_step_id = 0;
    // >= 0: not a step but the checkpoint of that job step: its tasks are
    // the ones asked for shards, and a task's "RunGraph" is its
    // ListShards and SaveShard (master/checkpointer.h).
    int64_t checkpoint_step = -1;
  };

  virtual ~StepObserver() = default;
  virtual void StepStarted(const StepInfo& step) = 0;
  // One partition's RunGraph on `task` ended after `elapsed` (all its
  // iterations), with `status`.
  virtual void RunGraphDone(int64_t step_id, const std::string& task, absl::Duration elapsed,
                            const absl::Status& status) = 0;
  // Every RunGraph of the step has ended; `status` is the step's.
  virtual void StepEnded(int64_t step_id, const absl::Status& status) = 0;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_STEP_OBSERVER_H_
