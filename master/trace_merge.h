// Merging the timelines of traced steps (`weft trace`,
// docs/observability.md) into one Chrome trace-event JSON document that
// Perfetto and chrome://tracing open.
//
// Each task records its spans on its own steady clock. For every traced
// RunGraph call the master knows when it sent the call and when the answer
// came (its clock), and the task says when the call arrived and when it
// answered (the task's clock): as in NTP, the task's offset is
// ((arrived - sent) + (answered_by_task - answered_at_master)) / 2, exact
// when the network's delays both ways are equal, and always off by at most
// half the round trip. Every span is moved onto the master's clock by its
// call's offset.
//
// The document has one process per task (named by the task, plus one for
// the master's dispatch: a "RunGraph" span per call), one thread per
// device and executor thread, and spans as complete events (ph "X") with
// the op and step id in args.
//
// TraceCollector is one `weft trace` in progress: a session asks it before
// each step whether to trace that step, and hands it the step's calls after.
//
// Thread-safety: ClockOffsetMicros and ChromeTraceJson are plain functions;
// TraceCollector is thread-safe.
#ifndef WEFT_MASTER_TRACE_MERGE_H_
#define WEFT_MASTER_TRACE_MERGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/trace.pb.h"

namespace weft {
namespace master {

// One task's part of one traced step, as the master saw it.
struct TracedCall {
  std::string task;         // "/job:worker/task:0"
  int64_t step_id = 0;
  int64_t sent_us = 0;      // master's steady clock: RunGraph issued
  int64_t answered_us = 0;  // master's steady clock: its answer arrived
  StepTrace trace;          // the task's spans, on the task's clock
};

// The task's clock minus the master's, in microseconds (0 when the call
// carries no trace).
int64_t ClockOffsetMicros(const TracedCall& call);

// The Chrome trace-event JSON of `calls`; `*spans` (may be null) counts the
// task spans in it.
std::string ChromeTraceJson(const std::vector<TracedCall>& calls, int* spans = nullptr);

class TraceCollector {
 public:
  explicit TraceCollector(int steps) : wanted_(steps) {}

  // True when the step about to run is to be traced: the first `steps`
  // steps that ask are.
  bool TakeStep();
  // A traced step's calls, once it ended (with any outcome).
  void AddStep(std::vector<TracedCall> calls);
  // Waits until every traced step was added or `timeout` passed; true when
  // all were.
  bool Wait(absl::Duration timeout);
  // The calls so far, and how many steps they cover.
  std::vector<TracedCall> Calls(int* steps) const;

 private:
  const int wanted_;
  mutable absl::Mutex mu_;
  int taken_ ABSL_GUARDED_BY(mu_) = 0;
  int done_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<TracedCall> calls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_TRACE_MERGE_H_
