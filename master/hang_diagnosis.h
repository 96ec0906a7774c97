// The one-line diagnosis of a stalled step: from what every task of the
// step answered to GetStepState (or that it did not answer), which task the
// step waits on and why.
//
// Each task is one of:
//   silent     it did not answer within the probe's deadline (stopped,
//              hung, unreachable): the strongest evidence there is;
//   waiting    its collectives miss chunks from a peer, or its _Recv ops
//              wait for a peer's tensor;
//   computing  an op of the step runs (the longest-running one is named);
//   pending    it answered, runs nothing of the step, yet its RunGraph (of
//              a checkpoint: its ListShards or SaveShard) has not
//              returned to the master;
//   done       nothing of the step left on it.
// Blamed, in this order of preference: the silent tasks; else the tasks
// others wait for that do not wait themselves; else the computing task with
// the longest-running op; else the pending tasks. The line names them and
// why, then what the others wait for:
//   "step 812 (41 s; median 12 ms) waits on worker:1: op dense_2/MatMul
//    running 41 s; worker:0 waits for its all-reduce chunk from worker:1"
//
// Thread-safety: plain functions.
#ifndef WEFT_MASTER_HANG_DIAGNOSIS_H_
#define WEFT_MASTER_HANG_DIAGNOSIS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/worker_service.pb.h"

namespace weft {
namespace master {

// What the master knows of the stalled step.
struct StalledStep {
  // The job's step, for people: the one a training step trains (the first
  // of its iterations), the last one trained before an evaluation step.
  int64_t job_step = 0;
  bool trains = true;         // false: an evaluation step
  int64_t first_step_id = 0;  // the session's step ids of the RunGraph:
  int iterations = 1;         // first_step_id .. + iterations - 1
  absl::Duration elapsed;     // how long it has run
  absl::Duration median;      // recent steps' median (zero: none yet)
  // The checkpoint of job_step, not a step: a task whose SaveShard has not
  // returned is pending.
  bool checkpoint = false;
};

// One task of the step.
struct TaskAnswer {
  std::string task;     // "/job:worker/task:1"
  absl::Status status;  // of GetStepState; DEADLINE_EXCEEDED or UNAVAILABLE: silent
  GetStepStateResponse state;
  bool run_graph_pending = false;  // its RunGraph of the step had not returned
};

struct Diagnosis {
  std::string line;
  // The same for a renewal of the same finding (the step and who is blamed
  // for what, without the times): the log says each key once.
  std::string key;
  std::vector<std::string> blamed;  // full task names
};

// `probe_timeout`: the deadline the silent tasks missed.
Diagnosis DiagnoseStall(const StalledStep& step, const std::vector<TaskAnswer>& answers,
                        absl::Duration probe_timeout);

// "/job:worker/task:1" -> "worker:1"; anything else unchanged.
std::string ShortTaskName(absl::string_view task);
// "41 s", "2.5 s", "12 ms".
std::string FormatSeconds(double seconds);

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_HANG_DIAGNOSIS_H_
