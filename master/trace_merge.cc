#include "master/trace_merge.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/json_text.h"

namespace weft {
namespace master {
namespace {

constexpr int kMasterPid = 1;

void AppendMeta(const char* what, int pid, int64_t tid, const std::string& name, std::string* out) {
  absl::StrAppend(out, out->empty() ? "" : ",\n", "{\"ph\":\"M\",\"name\":\"", what, "\",\"pid\":", pid,
                  ",\"tid\":", tid, ",\"args\":{\"name\":", JsonString(name), "}}");
}

void AppendSpan(const std::string& name, const std::string& cat, int pid, int64_t tid, int64_t ts, int64_t dur,
                const std::string& op, int64_t step, std::string* out) {
  absl::StrAppend(out, out->empty() ? "" : ",\n", "{\"ph\":\"X\",\"name\":", JsonString(name),
                  ",\"cat\":", JsonString(cat), ",\"pid\":", pid, ",\"tid\":", tid, ",\"ts\":", ts,
                  ",\"dur\":", std::max<int64_t>(dur, 0), ",\"args\":{\"op\":", JsonString(op),
                  ",\"step\":", step, "}}");
}

}  // namespace

int64_t ClockOffsetMicros(const TracedCall& c) {
  if (c.trace.received_us() == 0 && c.trace.replied_us() == 0) return 0;
  return ((c.trace.received_us() - c.sent_us) + (c.trace.replied_us() - c.answered_us)) / 2;
}

std::string ChromeTraceJson(const std::vector<TracedCall>& calls, int* spans) {
  // Times are shown from the first call's start.
  int64_t origin = INT64_MAX;
  for (const TracedCall& c : calls) origin = std::min(origin, c.sent_us);
  if (calls.empty()) origin = 0;
  std::map<std::string, int> pids;  // task -> pid
  std::map<std::pair<int, std::string>, int64_t> tids;  // (pid, device/thread) -> tid
  std::string events;
  AppendMeta("process_name", kMasterPid, 0, "master (dispatch)", &events);
  int count = 0;
  for (const TracedCall& c : calls) {
    auto [pit, new_task] = pids.emplace(c.task, static_cast<int>(pids.size()) + kMasterPid + 1);
    const int pid = pit->second;
    if (new_task) AppendMeta("process_name", pid, 0, c.task, &events);
    auto [mt, new_master_tid] = tids.emplace(std::make_pair(kMasterPid, c.task), 0);
    if (new_master_tid) {
      mt->second = static_cast<int64_t>(tids.size());
      AppendMeta("thread_name", kMasterPid, mt->second, "RunGraph to " + c.task, &events);
    }
    AppendSpan("RunGraph " + c.task, "dispatch", kMasterPid, mt->second, c.sent_us - origin,
               c.answered_us - c.sent_us, "RunGraph", c.step_id, &events);
    const int64_t offset = ClockOffsetMicros(c);
    for (const TraceSpan& s : c.trace.span()) {
      const std::string lane = absl::StrCat(s.device(), " thread ", s.thread());
      auto [tt, new_tid] = tids.emplace(std::make_pair(pid, lane), 0);
      if (new_tid) {
        tt->second = static_cast<int64_t>(tids.size());
        AppendMeta("thread_name", pid, tt->second, lane, &events);
      }
      AppendSpan(s.name(), s.op() == "RunGraph" ? "step" : "kernel", pid, tt->second, s.start_us() - offset - origin,
                 s.end_us() - s.start_us(), s.op(), s.step_id(), &events);
      ++count;
    }
  }
  if (spans != nullptr) *spans = count;
  return absl::StrCat("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", events, "\n]}\n");
}

bool TraceCollector::TakeStep() {
  absl::MutexLock lock(&mu_);
  if (taken_ >= wanted_) return false;
  ++taken_;
  return true;
}

void TraceCollector::AddStep(std::vector<TracedCall> calls) {
  absl::MutexLock lock(&mu_);
  for (TracedCall& c : calls) calls_.push_back(std::move(c));
  ++done_;
}

bool TraceCollector::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ >= wanted_; };
  return mu_.AwaitWithTimeout(absl::Condition(&all), timeout);
}

std::vector<TracedCall> TraceCollector::Calls(int* steps) const {
  absl::MutexLock lock(&mu_);
  if (steps != nullptr) *steps = done_;
  return calls_;
}

}  // namespace master
}  // namespace weft
