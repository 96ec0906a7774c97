#include "master/job_telemetry.h"

#include "absl/time/clock.h"

namespace weft {
namespace master {

JobTelemetry::JobTelemetry(metrics::Registry* r)
    : steps_(r->AddCounter("weft_steps_total", "Training steps completed, per job.", {"job"})),
      step_seconds_(r->AddHistogram("weft_step_duration_seconds",
                                    "Wall time of one training step as the master drives it, per job.", {"job"})),
      loss_(r->AddGauge("weft_loss", "Mean training loss over the current epoch so far, per job.", {"job"})),
      samples_per_second_(
          r->AddGauge("weft_samples_per_second", "Training examples per second, per job.", {"job"})),
      accuracy_(r->AddGauge("weft_test_accuracy", "Accuracy of the job's latest evaluation (0..1).", {"job"})),
      recoveries_(r->AddCounter("weft_recoveries_total",
                                "Recoveries of a job: a task lost or restarted, or the master restarted.", {"job"})),
      membership_changes_(r->AddCounter("weft_membership_changes_total",
                                        "Changes of an elastic job's workers (left, joined, rescaled).", {"job"})),
      workers_(r->AddGauge("weft_job_workers", "Workers an elastic job trains on now.", {"job"})) {}

JobTelemetry::PerJob* JobTelemetry::FindOrAddLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) return &it->second;
  PerJob& j = jobs_[job_id];
  const metrics::Labels labels = {job_id};
  j.steps = steps_->With(labels);
  j.step_seconds = step_seconds_->With(labels);
  j.loss = loss_->With(labels);
  j.samples_per_second = samples_per_second_->With(labels);
  j.accuracy = accuracy_->With(labels);
  j.recoveries = recoveries_->With(labels);
  j.membership_changes = membership_changes_->With(labels);
  j.workers = workers_->With(labels);
  j.accuracy->Set(-1);
  j.history.reserve(kMaxHistory);
  return &j;
}

void JobTelemetry::AppendLocked(PerJob* j, const HistoryPoint& point) {
  if (!j->history.empty() && j->history.back().step == point.step) {
    // An evaluation reported after its step's point: one point per step.
    if (point.accuracy >= 0) j->history.back().accuracy = point.accuracy;
    j->history.back().loss = point.loss;
    return;
  }
  // One point per stride of steps (steps can arrive 4 at a time), and
  // every evaluation.
  const int64_t bucket = point.step / j->stride;
  if (bucket == j->last_bucket && point.accuracy < 0) return;
  if (j->history.size() >= kMaxHistory) {
    // Keep every other point, evaluations always.
    size_t kept = 0;
    for (size_t i = 0; i < j->history.size(); ++i) {
      if (i % 2 == 0 || j->history[i].accuracy >= 0) j->history[kept++] = j->history[i];
    }
    j->history.resize(kept);
    j->stride *= 2;
  }
  j->last_bucket = point.step / j->stride;
  j->history.push_back(point);
}

void JobTelemetry::OnProgress(const std::string& job_id, const TrainProgress& p) {
  const auto now = std::chrono::steady_clock::now();
  absl::MutexLock lock(&mu_);
  PerJob* j = FindOrAddLocked(job_id);
  if (j->last_step >= 0 && p.step > j->last_step) {
    const int64_t steps = p.step - j->last_step;
    const double seconds = std::chrono::duration<double>(now - j->last_time).count();
    j->steps->Increment(static_cast<double>(steps));
    // Steps run in calls of steps_per_execution: each gets its share.
    for (int64_t i = 0; i < steps && i < 64; ++i) j->step_seconds->Observe(seconds / static_cast<double>(steps));
  } else if (j->last_step < 0 && p.step > 0) {
    j->steps->Increment(static_cast<double>(p.step));  // a resumed job's first report
  }
  if (p.step != j->last_step) {
    j->last_step = p.step;
    j->last_time = now;
  }
  j->loss->Set(p.loss);
  j->samples_per_second->Set(p.samples_per_second);
  // The loop reports the latest evaluation with every step after it: a
  // point carries an accuracy only where a new evaluation arrived.
  double evaluated = -1;
  if (p.test_accuracy >= 0 && (p.epoch_end || p.test_accuracy != j->last_accuracy)) evaluated = p.test_accuracy;
  if (p.test_accuracy >= 0) {
    j->accuracy->Set(p.test_accuracy);
    j->last_accuracy = p.test_accuracy;
  }
  AppendLocked(j, {p.step, p.loss, evaluated, absl::ToUnixMillis(absl::Now())});
}

void JobTelemetry::OnStatus(const JobStatus& s) {
  absl::MutexLock lock(&mu_);
  PerJob* j = FindOrAddLocked(s.job_id());
  if (s.restarts() > j->restarts) {
    j->recoveries->Increment(s.restarts() - j->restarts);
    j->restarts = s.restarts();
  }
  if (s.membership_change_size() > j->membership_changes_seen) {
    j->membership_changes->Increment(s.membership_change_size() - j->membership_changes_seen);
    j->membership_changes_seen = s.membership_change_size();
  }
  if (s.workers_size() > 0) j->workers->Set(s.workers_size());
  if (s.test_accuracy() >= 0) j->accuracy->Set(s.test_accuracy());
}

std::vector<HistoryPoint> JobTelemetry::History(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return {};
  return it->second.history;
}

}  // namespace master
}  // namespace weft
