// Shows training progress on a terminal or in a log.
//
// On a terminal: one line redrawn in place at most ten times a second,
//   [=========>          ] 4520/9370 epoch 5/10 loss 0.3121 68.2k samples/s ETA 0:07
// Elsewhere (a pipe, a CI log): a plain line at every tenth of the run and at
// every epoch's end, so logs stay short.
//
// Also the text of a job's failures and recoveries (RecoveringLine,
// RecoveredLine, RecoveryDetails, RecoveryJsonFields) and of its step times
// and stalls (StepTimeDetails, StepTimeJsonFields), which `weft submit
// --follow` and `weft status` print.
//
// Thread-safety: ProgressDisplay is not thread-safe; the functions are.
#ifndef WEFT_CLIENT_PROGRESS_H_
#define WEFT_CLIENT_PROGRESS_H_

#include <chrono>
#include <cstdio>
#include <string>

#include "proto/master_service.pb.h"
#include "runtime/trainer.h"

namespace weft {

class ProgressDisplay {
 public:
  // Draws to `out`; `terminal` picks the redrawn bar over plain lines.
  ProgressDisplay(std::FILE* out, bool terminal) : out_(out), terminal_(terminal) {}
  void Update(const TrainProgress& p);
  // Prints `line` on a line of its own (under the bar on a terminal, which
  // the next Update redraws; in a log, the next Update prints its step).
  void Notice(const std::string& line);
  // Ends the bar's line.
  void Finish();

  // The bar's text for `p` (no carriage return): for tests.
  static std::string BarLine(const TrainProgress& p, int width);

 private:
  std::FILE* out_;
  bool terminal_;
  bool drawn_ = false;
  int64_t next_plain_step_ = 0;
  std::chrono::steady_clock::time_point last_draw_{};
};

// For a job in state RECOVERING: which task failed, how, the job's restarts
// and the checkpoint it will resume from.
std::string RecoveringLine(const JobStatus& s);
// For a job that trains again after a recovery: how long it took, the
// steps lost and the step it is at.
std::string RecoveredLine(const JobStatus& s);
// `weft status`'s lines on failures, checkpoints and recovery, each
// "  name: value\n", only those the master set; empty for a job that never
// failed and has no checkpoint.
std::string RecoveryDetails(const JobStatus& s);
// The same as JSON members, every one always present (checkpoint_step -1
// when there is no checkpoint): `"restarts": 1, "failed_task": ...` with no
// braces, for appending to an object.
std::string RecoveryJsonFields(const JobStatus& s);

// `weft status`'s lines on stragglers and stalls (docs/observability.md):
// each task's recent step time (p50, p99, a straggler marked) and the hang
// diagnosis, "  stalled: <line>" while its step still runs, else
// "  last stall: <line> (at TIME)"; empty when the master has neither.
std::string StepTimeDetails(const JobStatus& s);
// The same as JSON members, always present: `"task_step_time": [{"task":
// ..., "p50_seconds": ..., "p99_seconds": ..., "steps": ..., "straggler":
// ...}], "diagnosis": ..., "diagnosis_active": ..., "diagnosis_time_unix_ms":
// ...`, for appending to an object.
std::string StepTimeJsonFields(const JobStatus& s);

}  // namespace weft

#endif  // WEFT_CLIENT_PROGRESS_H_
