#include "master/step_watch.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace weft {
namespace master {
namespace {

// A task's last steps on one line, from its GetStepState answer; the
// session's step ids read as the job's steps, counted from the stalled one.
std::string RecentSteps(const GetStepStateResponse& state, const StalledStep& stalled) {
  std::string out;
  for (const StepRecord& r : state.recent_step()) {
    if (!out.empty()) out += "; ";
    // Wrapping arithmetic: another session's ids start at another random base.
    const int64_t offset =
        static_cast<int64_t>(static_cast<uint64_t>(r.step_id()) - static_cast<uint64_t>(stalled.first_step_id));
    const bool near = offset > -1000000 && offset < 1000000;  // else another session's
    absl::StrAppend(&out, "step ", near ? stalled.job_step + offset : r.step_id(),
                    r.running() ? " running " : " ", FormatSeconds(r.seconds()),
                    r.running() ? "" : r.error().empty() ? " ok" : absl::StrCat(" ", r.error()));
  }
  return out.empty() ? "none" : out;
}

}  // namespace

StepWatch::StepWatch(std::string job, WorkerCacheInterface* workers, StepWatchOptions options,
                     JobStatusUpdater publish, JobStatusUpdater amend)
    : job_(std::move(job)),
      workers_(workers),
      options_(options),
      publish_(std::move(publish)),
      amend_(std::move(amend)) {
  thread_ = std::thread([this] { Loop(); });
}

StepWatch::~StepWatch() {
  bool active = false;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    active = diagnosed_step_ != 0;
    changed_.Signal();
  }
  thread_.join();
  // The job goes on without a watch (a new attempt) or has ended: nothing
  // it says is current any more.
  if (active && publish_) publish_([](JobStatus* s) { s->set_diagnosis_active(false); });
}

void StepWatch::SetPeers(const std::vector<std::string>& tasks) {
  absl::MutexLock lock(&mu_);
  peers_ = std::set<std::string>(tasks.begin(), tasks.end());
}

void StepWatch::NoteProgress(int64_t step) {
  absl::MutexLock lock(&mu_);
  job_step_ = step;
}

void StepWatch::StepStarted(const StepInfo& step) {
  absl::MutexLock lock(&mu_);
  Running& r = running_[step.step_id];
  r.info = step;
  r.done = 0;
  r.job_step = job_step_;
  r.next_probe = absl::InfinitePast();
  // A pipelined step waits for the one before it: its time starts when
  // that one ends (StepEnded), so it is not taken for a stalled one.
  if (step.after_step_id != 0 && running_.contains(step.after_step_id)) r.info.start = absl::InfiniteFuture();
  if (idle_) changed_.Signal();
}

void StepWatch::RunGraphDone(int64_t step_id, const std::string& task, absl::Duration elapsed,
                             const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  auto it = running_.find(step_id);
  if (it == running_.end()) return;
  Running& r = it->second;
  const std::vector<std::string>& tasks = *r.info.tasks;
  for (size_t i = 0; i < tasks.size() && i < 64; ++i) {
    if (tasks[i] == task) r.done |= uint64_t{1} << i;
  }
  if (r.info.trains && status.ok()) {
    const double seconds = absl::ToDoubleSeconds(elapsed) / std::max(1, r.info.iterations);
    times_.Add(task, seconds);
    if (!metrics_job_.empty()) {
      metrics::Histogram*& h = task_seconds_[task];
      if (h == nullptr) {
        h = metrics::Registry::Default()
                .AddHistogram("weft_task_step_duration_seconds",
                              "A task's RunGraph of one training step as the master timed it, per job and task.",
                              {"job", "task"})
                ->With({metrics_job_, task});
      }
      h->Observe(seconds);
    }
  }
}

void StepWatch::ExportMetrics(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  metrics_job_ = job_id;
}

void StepWatch::StepEnded(int64_t step_id, const absl::Status& status) {
  std::optional<std::vector<TaskStepTime>> times;
  {
    absl::MutexLock lock(&mu_);
    auto it = running_.find(step_id);
    if (it == running_.end()) return;
    const absl::Time now = absl::Now();
    // (A pipelined step's answer can overtake the end of the step before it.)
    if (it->second.info.trains && status.ok() && it->second.info.start != absl::InfiniteFuture()) {
      recent_[recent_next_] = absl::ToDoubleSeconds(now - it->second.info.start);
      recent_next_ = (recent_next_ + 1) % kRecentSteps;
      recent_size_ = std::min(recent_size_ + 1, kRecentSteps);
    }
    for (auto& [id, next] : running_) {
      if (next.info.after_step_id != step_id || next.info.start != absl::InfiniteFuture()) continue;
      next.info.start = now;
      next.job_step = it->second.job_step + it->second.info.iterations;
    }
    if (step_id == diagnosed_step_) {
      diagnosed_ended_ = true;
      diagnosed_status_ = status;
      changed_.Signal();
    }
    running_.erase(it);
    if (!times_.empty() && now - last_times_publish_ >= options_.publish_every) {
      last_times_publish_ = now;
      times = times_.Summaries(peers_);
    }
  }
  // Outside the lock: publishing may write the job's record.
  if (times.has_value() && amend_) {
    amend_([&](JobStatus* s) {
      s->clear_task_step_time();
      for (const TaskStepTime& t : *times) *s->add_task_step_time() = t;
    });
  }
}

absl::Duration StepWatch::MedianLocked() const {
  return absl::Seconds(Median(std::vector<double>(recent_.begin(), recent_.begin() + recent_size_)));
}

absl::Duration StepWatch::ThresholdLocked() const {
  return std::max(options_.floor, MedianLocked() * options_.factor);
}

StepWatch::Running* StepWatch::OldestLocked() {
  Running* oldest = nullptr;
  for (auto& [id, r] : running_) {
    if (oldest == nullptr || r.info.start < oldest->info.start) oldest = &r;
  }
  return oldest;
}

void StepWatch::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    if (diagnosed_step_ != 0 && diagnosed_ended_) {
      const std::string what = diagnosed_what_;
      const absl::Duration ran = absl::Now() - diagnosed_start_;
      const absl::Status status = diagnosed_status_;
      diagnosed_step_ = 0;
      diagnosed_ended_ = false;
      mu_.Unlock();
      Resolved(what, ran, status);
      mu_.Lock();
      continue;
    }
    Running* oldest = OldestLocked();
    if (oldest == nullptr) {
      idle_ = true;
      changed_.Wait(&mu_);
      idle_ = false;
      continue;
    }
    const absl::Time now = absl::Now();
    const bool first = oldest->next_probe == absl::InfinitePast();
    const absl::Time due = first ? oldest->info.start + ThresholdLocked() : oldest->next_probe;
    if (now < due) {
      changed_.WaitWithDeadline(&mu_, due);
      continue;
    }
    Probe p;
    // A training step is the one after the job's last; an evaluation
    // runs after the job's last step.
    const bool checkpoint = oldest->info.checkpoint_step >= 0;
    const int64_t job_step = checkpoint           ? oldest->info.checkpoint_step
                             : oldest->info.trains ? oldest->job_step + 1
                                                   : oldest->job_step;
    p.step = StalledStep{job_step, oldest->info.trains, oldest->info.step_id, oldest->info.iterations,
                         now - oldest->info.start, MedianLocked(), checkpoint};
    p.tasks = *oldest->info.tasks;
    p.done = oldest->done;
    if (!times_.empty()) p.times = times_.Summaries(peers_);
    oldest->next_probe = now + options_.renew_every;
    if (diagnosed_step_ != oldest->info.step_id) {
      diagnosed_step_ = oldest->info.step_id;
      diagnosed_what_ = absl::StrCat(checkpoint ? "checkpoint of step " : "step ", job_step);
      diagnosed_start_ = oldest->info.start;
      diagnosed_ended_ = false;
    }
    mu_.Unlock();
    Diagnose(p);
    mu_.Lock();
  }
}

std::vector<TaskAnswer> StepWatch::Ask(const std::vector<std::string>& tasks) {
  // Shared with the calls' callbacks: a task that answers after the wait
  // below has given up on it writes here, not into freed memory.
  struct Calls {
    absl::Mutex mu;
    int pending ABSL_GUARDED_BY(mu) = 0;
    std::vector<bool> answered ABSL_GUARDED_BY(mu);
    std::vector<absl::Status> status ABSL_GUARDED_BY(mu);
    std::vector<GetStepStateResponse> responses;
    GetStepStateRequest request;
  };
  auto calls = std::make_shared<Calls>();
  const size_t n = tasks.size();
  calls->responses.resize(n);
  {
    absl::MutexLock lock(&calls->mu);
    calls->answered.assign(n, false);
    calls->status.resize(n);
    calls->pending = static_cast<int>(n);
  }
  for (size_t i = 0; i < n; ++i) {
    WorkerInterface* w = workers_->GetOrCreateWorker(tasks[i]);
    auto done = [calls, i](const absl::Status& s) {
      absl::MutexLock lock(&calls->mu);
      calls->answered[i] = true;
      calls->status[i] = s;
      --calls->pending;
    };
    if (w == nullptr) {
      done(absl::NotFoundError(absl::StrCat("task ", tasks[i], " is not in the cluster")));
      continue;
    }
    w->GetStepStateAsync(&calls->request, &calls->responses[i], options_.probe_timeout, done);
  }
  std::vector<TaskAnswer> answers(n);
  absl::MutexLock lock(&calls->mu);
  // The calls carry the deadline; the margin only covers their delivery.
  calls->mu.AwaitWithTimeout(absl::Condition(
                                 +[](Calls* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu) { return c->pending == 0; },
                                 calls.get()),
                             options_.probe_timeout + absl::Seconds(1));
  for (size_t i = 0; i < n; ++i) {
    answers[i].task = tasks[i];
    if (!calls->answered[i]) {
      answers[i].status = absl::DeadlineExceededError("did not answer");
      continue;
    }
    answers[i].status = calls->status[i];
    if (calls->status[i].ok()) answers[i].state = calls->responses[i];
  }
  return answers;
}

void StepWatch::Diagnose(const Probe& p) {
  std::vector<TaskAnswer> answers = Ask(p.tasks);
  for (size_t i = 0; i < answers.size(); ++i) {
    answers[i].run_graph_pending = i >= 64 || (p.done & (uint64_t{1} << i)) == 0;
  }
  const Diagnosis d = DiagnoseStall(p.step, answers, options_.probe_timeout);
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  if (publish_) {
    publish_([&](JobStatus* s) {
      s->set_diagnosis(d.line);
      s->set_diagnosis_active(true);
      s->set_diagnosis_time_unix_ms(now_ms);
      if (p.times.empty()) return;
      s->clear_task_step_time();
      for (const TaskStepTime& t : p.times) *s->add_task_step_time() = t;
    });
  }
  if (d.key == last_key_) return;
  last_key_ = d.key;
  auto log = Logger("master");
  log->warn("job '{}': {}", job_, d.line);
  for (const TaskAnswer& a : answers) {
    if (a.status.ok()) log->info("job '{}': {} last steps: {}", job_, ShortTaskName(a.task), RecentSteps(a.state, p.step));
  }
}

void StepWatch::Resolved(const std::string& what, absl::Duration ran, const absl::Status& status) {
  last_key_.clear();
  if (publish_) publish_([](JobStatus* s) { s->set_diagnosis_active(false); });
  Logger("master")->info("job '{}': the stalled {} {} after {}", job_, what,
                         status.ok() ? std::string("went on") : absl::StrCat("ended (", status.ToString(), ")"),
                         FormatSeconds(absl::ToDoubleSeconds(ran)));
}

}  // namespace master
}  // namespace weft
