// TraceRecorder: collects the spans of one traced RunGraph call (`weft
// trace`, docs/observability.md): each kernel's start and end on the
// task's steady clock, the device and a small number for the thread that
// ran it. The executor records into it only when a call asks for a trace;
// otherwise it costs the step one null check per kernel.
//
// At most `max_spans` spans are kept; the rest are counted as dropped.
//
// Thread-safety: Record may be called from any thread.
#ifndef WEFT_RUNTIME_TRACE_RECORDER_H_
#define WEFT_RUNTIME_TRACE_RECORDER_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/trace.pb.h"

namespace weft {

class TraceRecorder {
 public:
  // `out` must outlive the recorder; spans are appended to it.
  explicit TraceRecorder(StepTrace* out, int64_t max_spans = 100000) : out_(out), max_spans_(max_spans) {}

  void Record(const std::string& name, const std::string& op, const std::string& device, int64_t start_us,
              int64_t end_us, int64_t step_id);

  // The steady clock in microseconds (the same in every process of a host).
  static int64_t NowMicros();
  // 1, 2, ... for each thread that asks, fixed for the thread's life.
  static int64_t ThreadNumber();

 private:
  absl::Mutex mu_;
  StepTrace* const out_ ABSL_PT_GUARDED_BY(mu_);
  const int64_t max_spans_;
};

}  // namespace weft

#endif  // WEFT_RUNTIME_TRACE_RECORDER_H_
