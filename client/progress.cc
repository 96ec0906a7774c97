#include "client/progress.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace weft {
namespace {

std::string Duration(double seconds) {
  if (!(seconds >= 0) || seconds > 359999) return "?";
  const int s = static_cast<int>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

std::string Rate(double r) {
  if (r >= 1e6) return absl::StrFormat("%.2fM", r / 1e6);
  if (r >= 1e3) return absl::StrFormat("%.1fk", r / 1e3);
  return absl::StrFormat("%.0f", r);
}

bool HasCheckpoint(const JobStatus& s) { return !s.checkpoint_path().empty() && s.checkpoint_step() >= 0; }

std::string UtcTime(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

std::string FailureTime(const JobStatus& s) { return UtcTime(s.failure_time_unix_ms()); }

// A step time: "12.3 ms", "1.25 s".
std::string StepSeconds(double seconds) {
  return seconds < 1 ? absl::StrFormat("%.1f ms", seconds * 1000) : absl::StrFormat("%.2f s", seconds);
}

// " test accuracy A" after an evaluation, or " test loss L" for a model
// without accuracy (a regression); "" when none ran.
std::string EvalFigures(const TrainProgress& p) {
  if (p.test_accuracy >= 0) return absl::StrFormat(" test accuracy %.4f", p.test_accuracy);
  if (p.test_loss >= 0) return absl::StrFormat(" test loss %.4f", p.test_loss);
  return "";
}

}  // namespace

std::string ProgressDisplay::BarLine(const TrainProgress& p, int width) {
  const double frac = p.total_steps > 0 ? std::min(1.0, static_cast<double>(p.step) / p.total_steps) : 0;
  const int filled = static_cast<int>(frac * width);
  std::string bar(width, ' ');
  std::fill(bar.begin(), bar.begin() + filled, '=');
  if (filled < width && filled > 0) bar[filled] = '>';
  const double steps_per_s = p.elapsed_seconds > 0 ? p.step / p.elapsed_seconds : 0;
  const double eta = steps_per_s > 0 ? (p.total_steps - p.step) / steps_per_s : -1;
  std::string epoch = p.epochs > 0 ? absl::StrFormat(" epoch %d/%d", std::min(p.epoch, p.epochs), p.epochs) : "";
  return absl::StrFormat("[%s] %d/%d%s loss %.4f %s samples/s ETA %s", bar, p.step, p.total_steps, epoch, p.loss,
                         Rate(p.samples_per_second), Duration(eta));
}

void ProgressDisplay::Update(const TrainProgress& p) {
  if (terminal_) {
    const auto now = std::chrono::steady_clock::now();
    const bool last = p.step >= p.total_steps;
    if (!p.epoch_end && !last && drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    std::string line = BarLine(p, 30);
    const std::string eval = p.epoch_end ? EvalFigures(p) : std::string();
    line += eval;
    std::fprintf(out_, "\r%s\x1b[K", line.c_str());
    if (!eval.empty()) std::fprintf(out_, "\n");
    std::fflush(out_);
    drawn_ = true;
    return;
  }
  if (p.epoch_end) {
    absl::FPrintF(out_, "epoch %d done: step %d/%d loss %.4f %s samples/s%s\n", p.epoch, p.step, p.total_steps,
                  p.loss, Rate(p.samples_per_second), EvalFigures(p));
    std::fflush(out_);
    return;
  }
  if (p.step >= next_plain_step_) {
    absl::FPrintF(out_, "step %d/%d loss %.4f %s samples/s\n", p.step, p.total_steps, p.loss,
                  Rate(p.samples_per_second));
    std::fflush(out_);
    next_plain_step_ = p.step + std::max<int64_t>(1, p.total_steps / 10);
  }
}

void ProgressDisplay::Notice(const std::string& line) {
  if (terminal_ && drawn_) std::fprintf(out_, "\r\x1b[K");
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
  drawn_ = false;        // redraw the bar at once
  next_plain_step_ = 0;  // and say where training stands
}

void ProgressDisplay::Finish() {
  if (terminal_ && drawn_) {
    std::fprintf(out_, "\n");
    std::fflush(out_);
  }
  drawn_ = false;
}

std::string RecoveringLine(const JobStatus& s) {
  std::string line = absl::StrCat("recovering (restart ", s.restarts(), "):");
  if (!s.failed_task().empty()) absl::StrAppend(&line, " task ", s.failed_task(), " failed");
  if (!s.failure().empty()) absl::StrAppend(&line, s.failed_task().empty() ? " " : ": ", s.failure());
  if (!s.failed_task().empty() || !s.failure().empty()) absl::StrAppend(&line, ";");
  if (HasCheckpoint(s)) {
    absl::StrAppend(&line, " checkpoint: step ", s.checkpoint_step());
  } else {
    absl::StrAppend(&line, " no checkpoint yet");
  }
  return line;
}

std::string RecoveredLine(const JobStatus& s) {
  std::string line = absl::StrCat("recovered (restart ", s.restarts(), ")");
  if (s.recovery_seconds() > 0) absl::StrAppendFormat(&line, " after %.1f s", s.recovery_seconds());
  absl::StrAppendFormat(&line, "; %d steps lost in all; training at step %d", s.steps_lost(), s.step());
  return line;
}

std::string RecoveryDetails(const JobStatus& s) {
  std::string out;
  if (s.restarts() > 0) absl::StrAppend(&out, "  restarts: ", s.restarts(), "\n");
  if (!s.failed_task().empty()) absl::StrAppend(&out, "  failed task: ", s.failed_task(), "\n");
  if (!s.failure().empty()) {
    absl::StrAppend(&out, "  failure: ", s.failure());
    if (s.failure_time_unix_ms() > 0) absl::StrAppend(&out, " (at ", FailureTime(s), ")");
    absl::StrAppend(&out, "\n");
  } else if (s.failure_time_unix_ms() > 0) {
    absl::StrAppend(&out, "  failure time: ", FailureTime(s), "\n");
  }
  if (HasCheckpoint(s)) {
    absl::StrAppend(&out, "  checkpoint: step ", s.checkpoint_step(), " in ", s.checkpoint_path(), "\n");
  }
  if (s.restarts() > 0 || s.steps_lost() > 0) absl::StrAppend(&out, "  steps lost: ", s.steps_lost(), "\n");
  if (s.recovery_seconds() > 0) absl::StrAppend(&out, absl::StrFormat("  recovery: %.1f s\n", s.recovery_seconds()));
  if (s.workers_size() > 0) absl::StrAppend(&out, "  workers: ", absl::StrJoin(s.workers(), ", "), "\n");
  for (const MembershipChange& c : s.membership_change()) {
    absl::StrAppendFormat(&out, "  membership: from step %d (at %s) on %d worker(s) after %.2f s", c.step(),
                          UtcTime(c.time_unix_ms()), c.workers(), c.seconds());
    if (c.left_size() > 0) absl::StrAppend(&out, "; left: ", absl::StrJoin(c.left(), ", "));
    if (c.joined_size() > 0) absl::StrAppend(&out, "; joined: ", absl::StrJoin(c.joined(), ", "));
    if (!c.reason().empty()) absl::StrAppend(&out, "; ", c.reason());
    absl::StrAppend(&out, "\n");
  }
  return out;
}

namespace {

std::string JsonStrings(const google::protobuf::RepeatedPtrField<std::string>& v) {
  std::string out;
  for (const std::string& s : v) absl::StrAppend(&out, out.empty() ? "" : ", ", JsonString(s));
  return absl::StrCat("[", out, "]");
}

}  // namespace

std::string StepTimeDetails(const JobStatus& s) {
  std::string out;
  if (s.task_step_time_size() > 0) {
    size_t width = 4;
    for (const TaskStepTime& t : s.task_step_time()) width = std::max(width, t.task().size());
    const int w = static_cast<int>(width);
    absl::StrAppendFormat(&out, "  step time per task:\n    %-*s %10s %10s %6s\n", w, "task", "p50", "p99", "steps");
    for (const TaskStepTime& t : s.task_step_time()) {
      absl::StrAppendFormat(&out, "    %-*s %10s %10s %6d%s\n", w, t.task(), StepSeconds(t.p50_seconds()),
                            StepSeconds(t.p99_seconds()), t.steps(), t.straggler() ? "  straggler" : "");
    }
  }
  if (!s.diagnosis().empty()) {
    if (s.diagnosis_active()) {
      absl::StrAppend(&out, "  stalled: ", s.diagnosis(), "\n");
    } else {
      absl::StrAppend(&out, "  last stall: ", s.diagnosis(), " (at ", UtcTime(s.diagnosis_time_unix_ms()), ")\n");
    }
  }
  return out;
}

std::string StepTimeJsonFields(const JobStatus& s) {
  std::string times;
  for (const TaskStepTime& t : s.task_step_time()) {
    absl::StrAppendFormat(&times, "%s{\"task\": %s, \"p50_seconds\": %.6f, \"p99_seconds\": %.6f, \"steps\": %d, "
                          "\"straggler\": %s}",
                          times.empty() ? "" : ", ", JsonString(t.task()), t.p50_seconds(), t.p99_seconds(), t.steps(),
                          t.straggler() ? "true" : "false");
  }
  return absl::StrFormat("\"task_step_time\": [%s], \"diagnosis\": %s, \"diagnosis_active\": %s, "
                         "\"diagnosis_time_unix_ms\": %d",
                         times, JsonString(s.diagnosis()), s.diagnosis_active() ? "true" : "false",
                         s.diagnosis_time_unix_ms());
}

std::string RecoveryJsonFields(const JobStatus& s) {
  std::string changes;
  for (const MembershipChange& c : s.membership_change()) {
    absl::StrAppendFormat(&changes, "%s{\"step\": %d, \"time_unix_ms\": %d, \"left\": %s, \"joined\": %s, "
                          "\"workers\": %d, \"seconds\": %.3f, \"reason\": %s}",
                          changes.empty() ? "" : ", ", c.step(), c.time_unix_ms(), JsonStrings(c.left()),
                          JsonStrings(c.joined()), c.workers(), c.seconds(), JsonString(c.reason()));
  }
  return absl::StrFormat(
      "\"restarts\": %d, \"failed_task\": %s, \"failure\": %s, \"failure_time_unix_ms\": %d, "
      "\"checkpoint_step\": %d, \"checkpoint_path\": %s, \"steps_lost\": %d, \"recovery_seconds\": %.3f, "
      "\"workers\": %s, \"membership_change\": [%s]",
      s.restarts(), JsonString(s.failed_task()), JsonString(s.failure()), s.failure_time_unix_ms(),
      HasCheckpoint(s) ? s.checkpoint_step() : -1, JsonString(s.checkpoint_path()), s.steps_lost(),
      s.recovery_seconds(), JsonStrings(s.workers()), changes);
}

}  // namespace weft
