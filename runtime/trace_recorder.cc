#include "runtime/trace_recorder.h"

#include <atomic>
#include <chrono>

namespace weft {

void TraceRecorder::Record(const std::string& name, const std::string& op, const std::string& device,
                           int64_t start_us, int64_t end_us, int64_t step_id) {
  const int64_t thread = ThreadNumber();
  absl::MutexLock lock(&mu_);
  if (out_->span_size() >= max_spans_) {
    out_->set_dropped(out_->dropped() + 1);
    return;
  }
  TraceSpan* s = out_->add_span();
  s->set_name(name);
  s->set_op(op);
  s->set_device(device);
  s->set_thread(thread);
  s->set_start_us(start_us);
  s->set_end_us(end_us);
  s->set_step_id(step_id);
}

int64_t TraceRecorder::NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t TraceRecorder::ThreadNumber() {
  static std::atomic<int64_t> next{1};
  thread_local const int64_t mine = next.fetch_add(1, std::memory_order_relaxed);
  return mine;
}

}  // namespace weft
