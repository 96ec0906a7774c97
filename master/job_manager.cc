#include "master/job_manager.h"

#include "master/trace_merge.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "graph/lowering.h"
#include "job/job_spec.h"
#include "master/job_manager_internal.h"
#include "master/job_runner.h"
#include "master/job_summaries.h"

namespace weft {
namespace master {

bool IsTerminal(JobState state) { return state == SUCCEEDED || state == FAILED || state == CANCELLED; }

namespace {

class JobWatchImpl final : public JobWatch {
 public:
  using RemoveFn = std::function<void()>;
  explicit JobWatchImpl(RemoveFn remove) : remove_(std::move(remove)) {}
  ~JobWatchImpl() override { remove_(); }

 private:
  RemoveFn remove_;
};

// The status of a job whose runner returned `result`.
// JobStatus.epoch_end keeps the newest this many epochs.
constexpr int kEpochEndsKept = 4096;

// Appends the epoch that `p` ends to s->epoch_end, dropping the oldest past
// kEpochEndsKept.
void RecordEpochEnd(const TrainProgress& p, JobStatus* s) {
  auto* ends = s->mutable_epoch_end();
  if (ends->size() >= kEpochEndsKept) ends->DeleteSubrange(0, ends->size() - kEpochEndsKept + 1);
  EpochEnd* e = ends->Add();
  e->set_epoch(p.epoch);
  e->set_step(p.step);
  e->set_train_loss(p.loss);
  e->set_test_accuracy(p.test_accuracy);
  e->set_test_loss(p.test_loss);
}

void RecordResult(const absl::StatusOr<TrainResult>& result, bool cancelled, JobStatus* s) {
  if (!result.ok()) {
    s->set_state(cancelled ? CANCELLED : FAILED);
    if (!cancelled) {
      // "UNAVAILABLE: training step 12: task /job:worker/task:0: ...": the
      // code tells a client whether retrying can help.
      s->set_error(result.status().ToString());
      s->set_error_code(static_cast<int>(result.status().code()));
    }
    return;
  }
  if (result->state == PREEMPTED) {
    // Not an end: a restarted master resumes it from its checkpoint.
    s->set_state(RECOVERING);
    s->set_failed_task("master");
    s->set_failure(absl::StrCat("the master stopped (SIGTERM) at step ", result->steps,
                                "; the job resumes when it restarts"));
    s->set_failure_time_unix_ms(absl::ToUnixMillis(absl::Now()));
    return;
  }
  s->set_state(result->state == CANCELLED ? CANCELLED : SUCCEEDED);
  s->set_step(result->steps);
  s->set_epoch(result->epochs);
  s->set_train_loss(result->train_loss);
  s->set_test_accuracy(result->test_accuracy);
  s->set_test_loss(result->test_loss);
  s->set_test_examples(result->test_examples);
  s->set_test_top_k_accuracy(result->test_top_k_accuracy);
  s->set_test_perplexity(result->test_perplexity);
  s->set_samples_per_second(result->samples_per_second);
  s->set_warmup_seconds(result->warmup_seconds);
  s->set_wall_seconds(result->wall_seconds);
}

}  // namespace

JobManager::JobManager(JobManagerOptions options)
    : options_(std::move(options)),
      own_store_(options_.store == nullptr ? std::make_unique<MemoryJobStore>() : nullptr),
      store_(options_.store != nullptr ? options_.store : own_store_.get()) {
  // The runners wait on the queue until jobs (resumed ones first) arrive.
  const int runners = std::max(options_.max_running_jobs, 1);
  runners_.reserve(runners);
  for (int i = 0; i < runners; ++i) runners_.emplace_back([this] { RunnerLoop(); });
  auto records = store_->LoadAll();
  if (!records.ok()) {
    Logger("master")->error("reading the job store: {}", records.status().ToString());
    return;
  }
  absl::MutexLock lock(&mu_);
  for (JobRecord& r : *records) {
    auto job = std::make_shared<Job>(r.status.job_id(), std::move(r.spec));
    bool resume = false;
    {
      absl::MutexLock job_lock(&job->mu);
      job->status = std::move(r.status);
      job->finished = true;
      if (!IsTerminal(job->status.state())) {
        // The previous master did not finish it: resume it from its newest
        // checkpoint (or from the start), unless it cannot run any more.
        absl::StatusOr<TrainingGraph> training = LowerJob(job->spec);
        if (training.ok() && job->spec.strategy().kind() != StrategySpec::NONE && !shutting_down_) {
          JobRunnerOptions ro = RunnerOptions(job.get(), job->status.owner());
          ro.resumed = true;
          ro.reached_step = job->status.step();
          job->runner = std::make_unique<JobRunner>(job->spec, *std::move(training), absl::StrCat("job/", job->id),
                                                    options_.workers, std::move(ro));
          job->finished = false;
          job->status.set_state(RECOVERING);
          job->status.set_restarts(job->status.restarts() + 1);
          job->status.set_failed_task("master");
          job->status.set_failure("the master restarted while the job ran; resuming from its newest checkpoint");
          // About when the old master stopped: its last write (progress
          // is stored every 2 s), so recovery time includes the downtime.
          job->status.set_failure_time_unix_ms(r.updated_unix_ms > 0 ? r.updated_unix_ms
                                                                     : absl::ToUnixMillis(absl::Now()));
          resume = true;
        } else {
          job->status.set_state(FAILED);
          job->status.set_error(training.ok() ? "the master restarted while the job ran (a job without a strategy "
                                                "does not resume)"
                                              : absl::StrCat("the master restarted while the job ran, and the job "
                                                             "no longer lowers: ",
                                                             training.status().ToString()));
        }
        store_->Put(JobRecord{job->spec, job->status}).IgnoreError();
      }
    }
    if (resume) {
      Logger("master")->info("job {} ('{}') was running under the previous master: resuming it", job->id,
                             job->spec.name());
      queue_.push_back(job);
    }
    order_.push_back(job->id);
    // Ids continue after the highest one found.
    int64_t n = 0;
    const absl::string_view seq = absl::StripPrefix(job->id, "job-");
    if (absl::SimpleAtoi(seq.substr(0, seq.find('-')), &n) && n >= next_id_) next_id_ = n + 1;
    jobs_[job->id] = std::move(job);
  }
}

JobRunnerOptions JobManager::RunnerOptions(Job* job, const std::string& owner) {
  JobRunnerOptions o;
  o.env = options_.env;
  o.checkpoint_root = options_.checkpoint_root;
  o.uploads = options_.uploads;
  o.owner = owner;
  o.update_status = [this, job](const std::function<void(JobStatus*)>& update) { Update(job, update, /*force=*/true); };
  o.amend_status = [this, job](const std::function<void(JobStatus*)>& update) { Update(job, update, /*force=*/false); };
  o.step_watch = options_.step_watch;
  return o;
}

JobManager::~JobManager() { Shutdown(); }

absl::StatusOr<std::string> JobManager::Submit(const JobSpec& spec, const std::string& owner) {
  if (options_.checkpoint_root.has_value()) {
    // Relative checkpoint directories are relative to the root; ValidateJob,
    // which knows no root, sees them as the absolute paths they stand for.
    JobSpec as_absolute = spec;
    CheckpointPolicy* ck = as_absolute.mutable_checkpoint();
    if (!ck->dir().empty() && ck->dir()[0] != '/') ck->set_dir(JoinPath(options_.checkpoint_root->path(), ck->dir()));
    if (!ck->resume_from().empty() && ck->resume_from()[0] != '/') {
      ck->set_resume_from(JoinPath(options_.checkpoint_root->path(), ck->resume_from()));
    }
    RETURN_IF_ERROR(ValidateJob(as_absolute));
    RETURN_IF_ERROR(CheckCheckpointPolicy(*options_.checkpoint_root, spec.checkpoint(), owner));
    RETURN_IF_ERROR(CheckSummaryPolicy(*options_.checkpoint_root, spec, owner));
  } else {
    RETURN_IF_ERROR(ValidateJob(spec));
  }
  absl::StatusOr<TrainingGraph> training = LowerJob(spec);
  if (!training.ok()) {
    // Whatever lowering rejects is wrong in the job, whichever code it used.
    return absl::InvalidArgumentError(absl::StrCat("job: ", training.status().message()));
  }

  absl::MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("the master is shutting down");
  RETURN_IF_ERROR(CheckQueueRoomLocked());
  // A sequence number for people, and 64 random bits so that an id cannot
  // be guessed from another.
  const std::string id = absl::StrFormat("job-%d-%016x", next_id_++, absl::Uniform<uint64_t>(absl::BitGen()));
  auto job = std::make_shared<Job>(id, spec);
  job->runner = std::make_unique<JobRunner>(spec, *std::move(training), absl::StrCat("job/", id), options_.workers,
                                            RunnerOptions(job.get(), owner));
  {
    absl::MutexLock job_lock(&job->mu);
    JobStatus& s = job->status;
    s.set_job_id(id);
    s.set_owner(owner);
    s.set_name(spec.name().empty() ? id : spec.name());
    s.set_state(PENDING);
    s.set_epochs(spec.steps() > 0 ? 0 : spec.epochs());
    s.set_total_steps(spec.steps());
    s.set_test_accuracy(-1);
    s.set_test_loss(-1);
    s.set_test_top_k_accuracy(-1);
    s.set_test_perplexity(-1);
    s.set_submit_time_unix_ms(absl::ToUnixMillis(absl::Now()));
  }
  Persist(job.get());
  jobs_[id] = job;
  order_.push_back(id);
  queue_.push_back(std::move(job));
  Logger("master")->info("job {} ('{}') submitted by {}", id, spec.name(), owner.empty() ? "(no user)" : owner);
  return id;
}

absl::Status JobManager::CheckQueueRoomLocked() const {
  // Jobs that an idle runner is about to take do not wait: the new job is
  // refused only when it would itself have to wait past the bound.
  const int64_t runners = std::max(options_.max_running_jobs, 1);
  const int64_t idle = runners - busy_runners_;
  const int64_t queued = static_cast<int64_t>(queue_.size());
  const int64_t waiting = std::max<int64_t>(0, queued - idle);
  const int64_t max_queued = std::max(options_.max_queued_jobs, 0);
  if (queued + 1 - idle > max_queued) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the master's job queue is full: ", waiting, " job(s) wait while ", busy_runners_,
        " run (--max_queued_jobs=", max_queued, ", --max_running_jobs=", runners,
        "); submit again once a job has ended"));
  }
  return absl::OkStatus();
}

std::shared_ptr<JobManager::Job> JobManager::Find(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second;
}

absl::StatusOr<JobStatus> JobManager::Get(const std::string& job_id) const {
  std::shared_ptr<Job> job = Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  absl::MutexLock lock(&job->mu);
  return job->status;
}

std::vector<JobStatus> JobManager::List() const {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& id : order_) jobs.push_back(jobs_.at(id));
  }
  std::vector<JobStatus> out;
  for (const auto& job : jobs) {
    absl::MutexLock lock(&job->mu);
    out.push_back(job->status);
  }
  return out;
}

absl::StatusOr<std::shared_ptr<JobManager::Job>> JobManager::FindUnended(const std::string& job_id) const {
  std::shared_ptr<Job> job = Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  absl::MutexLock lock(&job->mu);
  if (IsTerminal(job->status.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " has already ended: ", JobState_Name(job->status.state())));
  }
  return job;
}

absl::Status JobManager::Scale(const std::string& job_id, int workers) {
  ASSIGN_OR_RETURN(std::shared_ptr<Job> job, FindUnended(job_id));
  absl::MutexLock lock(&job->mu);
  if (job->runner == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is queued: scale it once it runs"));
  }
  return job->runner->Scale(workers);
}

absl::Status JobManager::Cancel(const std::string& job_id) {
  ASSIGN_OR_RETURN(std::shared_ptr<Job> job, FindUnended(job_id));
  bool dequeued = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = std::find(queue_.begin(), queue_.end(), job);
    if (it != queue_.end()) {
      queue_.erase(it);
      dequeued = true;
    }
  }
  if (dequeued) {
    // Taken out of the queue here: this thread alone ends it.
    EndQueued(job.get(), /*at_shutdown=*/false);
    Logger("master")->info("job {}: cancelled before it ran", job_id);
    return absl::OkStatus();
  }
  // Running, or a runner has just taken it: its runner stops it (Run checks
  // for a cancel before it starts).
  if (job->runner != nullptr) job->runner->Cancel();
  Logger("master")->info("job {}: cancel requested", job_id);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<JobWatch>> JobManager::Watch(const std::string& job_id,
                                                            std::function<void(const JobStatus&)> on_status) {
  std::shared_ptr<Job> job = Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  auto w = std::make_shared<Watcher>(std::move(on_status));
  {
    // Holding the watcher's lock from before it is listed until the first
    // status is delivered keeps a newer status from overtaking it.
    absl::MutexLock deliver(w->mu());
    JobStatus now;
    {
      absl::MutexLock lock(&job->mu);
      job->watchers.push_back(w);
      now = job->status;
    }
    w->DeliverLocked(now);
  }
  return std::unique_ptr<JobWatch>(new JobWatchImpl([job, w] {
    {
      absl::MutexLock lock(&job->mu);
      auto& ws = job->watchers;
      ws.erase(std::remove(ws.begin(), ws.end(), w), ws.end());
    }
    w->Stop();
  }));
}

absl::StatusOr<TraceJobResponse> JobManager::Trace(const std::string& job_id, int steps, absl::Duration timeout) {
  std::shared_ptr<Job> job = Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  if (job->runner == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " does not run: nothing to trace"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<TraceCollector> collector, job->runner->StartTrace(steps));
  const bool all = collector->Wait(timeout);
  int recorded = 0;
  std::vector<TracedCall> calls = collector->Calls(&recorded);
  if (recorded == 0) {
    return absl::DeadlineExceededError(absl::StrCat("job ", job_id, " ran no step within ",
                                                    absl::FormatDuration(timeout), " of the trace's start"));
  }
  if (!all) {
    Logger("master")->warn("trace of job {}: {} of {} steps ran within {}", job_id, recorded, steps,
                           absl::FormatDuration(timeout));
  }
  TraceJobResponse response;
  int spans = 0;
  response.set_trace_json(ChromeTraceJson(calls, &spans));
  response.set_steps(recorded);
  response.set_spans(spans);
  return response;
}

absl::StatusOr<JobStatus> JobManager::Wait(const std::string& job_id, absl::Duration timeout) {
  std::shared_ptr<Job> job = Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  absl::MutexLock lock(&job->mu);
  if (!job->mu.AwaitWithTimeout(absl::Condition(&job->finished), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("job ", job_id, " is still ", JobState_Name(job->status.state())));
  }
  return job->status;
}

// REQUIRES: called by a runner that counted itself in busy_runners_; gives
// that count back before the job's end is published.
void JobManager::RunJob(Job* job) {
  auto log = Logger("master");
  // A resumed job stays RECOVERING until its runner has restored it.
  Update(
      job, [](JobStatus* s) { if (s->state() != RECOVERING) s->set_state(RUNNING); }, /*force=*/true);
  std::unique_ptr<JobSummaries> summaries =
      JobSummaries::OpenOrLog(job->spec, job->id, options_.checkpoint_root, options_.env);
  absl::StatusOr<TrainResult> result = job->runner->Run([&](const TrainProgress& p) {
    telemetry_.OnProgress(job->id, p);
    summaries->OnProgress(p);
    Update(
        job,
        [&](JobStatus* s) {
          s->set_step(p.step);
          s->set_total_steps(p.total_steps);
          s->set_epoch(p.epoch);
          s->set_epochs(p.epochs);
          s->set_loss(p.loss);
          if (p.epoch_end) s->set_train_loss(p.loss);
          if (p.test_accuracy >= 0) s->set_test_accuracy(p.test_accuracy);
          if (p.test_loss >= 0) s->set_test_loss(p.test_loss);
          s->set_samples_per_second(p.samples_per_second);
          s->set_wall_seconds(p.elapsed_seconds);
          if (p.epoch_end) RecordEpochEnd(p, s);
        },
        /*force=*/false);
  });
  summaries->OnResult(result);
  const bool cancelled = job->runner->cancelled();
  {
    // The slot is free before the end is published: a Submit made once Wait
    // has seen this job end counts this runner as idle.
    absl::MutexLock lock(&mu_);
    --busy_runners_;
  }
  Update(job, [&](JobStatus* s) { RecordResult(result, cancelled, s); }, /*force=*/true);
  if (result.ok() && result->state == PREEMPTED) {
    // Its watchers and Wait see the stop; the store keeps it RECOVERING.
    absl::MutexLock lock(&job->mu);
    job->finished = true;
    log->info("job {} stopped with the master; it resumes when the master restarts", job->id);
  } else if (result.ok()) {
    log->info("job {} ended {}", job->id, JobState_Name(result->state));
  } else if (cancelled) {
    log->info("job {} cancelled", job->id);
  } else {
    log->error("job {} failed: {}", job->id, result.status().ToString());
  }
}

}  // namespace master
}  // namespace weft
