// JobManager's queue and its runner threads (RunnerLoop takes the oldest
// queued job; RunJob, in job_manager.cc, runs it), the publication of job
// statuses to watchers and the store, and Shutdown.
#include "master/job_manager.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "common/logging.h"
#include "master/job_manager_internal.h"

namespace weft {
namespace master {
namespace {

constexpr absl::Duration kPersistProgressEvery = absl::Seconds(2);

}  // namespace

void JobManager::RunnerLoop() {
  auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shutting_down_ || !queue_.empty(); };
  for (;;) {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&has_work));
      // Shutdown empties the queue as it sets shutting_down_.
      if (shutting_down_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      ++busy_runners_;
    }
    RunJob(job.get());  // frees this runner's slot before it publishes the end
  }
}

void JobManager::EndQueued(Job* job, bool at_shutdown) {
  if (at_shutdown && options_.preempt_on_shutdown && job->spec.strategy().kind() != StrategySpec::NONE) {
    // Like a preempted running job: it stays unfinished (PENDING or
    // RECOVERING) in the store, and the next master runs it.
    Update(job, [](JobStatus*) {}, /*force=*/true);
    absl::MutexLock lock(&job->mu);
    job->finished = true;
    return;
  }
  Update(job, [](JobStatus* s) { s->set_state(CANCELLED); }, /*force=*/true);
}

void JobManager::Shutdown() {
  absl::MutexLock serial(&shutdown_mu_);
  std::vector<std::shared_ptr<Job>> jobs;
  std::deque<std::shared_ptr<Job>> queued;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    queued.swap(queue_);
    for (auto& [id, job] : jobs_) jobs.push_back(job);
  }
  // The running ones first: they take a step to stop, the queued ones none.
  for (auto& job : jobs) {
    if (job->runner == nullptr) continue;
    if (std::find(queued.begin(), queued.end(), job) != queued.end()) continue;
    if (options_.preempt_on_shutdown) {
      job->runner->Preempt();
    } else {
      job->runner->Cancel();
    }
  }
  for (auto& job : queued) EndQueued(job.get(), /*at_shutdown=*/true);
  for (std::thread& t : runners_) {
    if (t.joinable()) t.join();
  }
  runners_.clear();
}

void JobManager::Update(Job* job, const std::function<void(JobStatus*)>& update, bool force) {
  JobStatus snapshot;
  std::vector<std::shared_ptr<Watcher>> watchers;
  {
    absl::MutexLock lock(&job->mu);
    update(&job->status);
    const absl::Time now = absl::Now();
    if (!force && now - job->last_publish < options_.progress_interval) return;
    job->last_publish = now;
    snapshot = job->status;
    watchers = job->watchers;
  }
  // Only the job's owner publishes (its runner, or whoever took it out of
  // the queue), so watchers see statuses in order.
  for (const auto& w : watchers) w->Deliver(snapshot);
  telemetry_.OnStatus(snapshot);
  // Progress reaches the store every few seconds too, so that a restarted
  // master knows about how far the job had come.
  bool persist = force;
  {
    absl::MutexLock lock(&job->mu);
    const absl::Time now = absl::Now();
    if (now - job->last_persist >= kPersistProgressEvery) persist = true;
    if (persist) job->last_persist = now;
  }
  if (persist) Persist(job);
  if (IsTerminal(snapshot.state())) {
    absl::MutexLock lock(&job->mu);
    job->finished = true;
  }
}

void JobManager::Persist(Job* job) {
  JobRecord r;
  r.spec = job->spec;
  {
    absl::MutexLock lock(&job->mu);
    r.status = job->status;
  }
  absl::Status s = store_->Put(r);
  if (!s.ok()) Logger("master")->error("job {}: saving its record: {}", job->id, s.ToString());
}

}  // namespace master
}  // namespace weft
