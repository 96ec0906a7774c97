// StepWatch: times a job's steps per task and diagnoses the step that
// stalls (docs/observability.md, "Stragglers and hangs").
//
// A MasterSession reports to it as a StepObserver, and so does the job's
// Checkpointer for each checkpoint it writes (a stopped task holds a save
// up as it does a step). It keeps each task's
// recent time per training step (StepTimes) and publishes p50, p99 and the
// straggler flags into the job's status (JobStatus.task_step_time) at most
// once per `publish_every` as steps end, through `amend` (no publication of
// its own: the next progress update carries it), and with each diagnosis.
//
// A thread of its own sleeps until the oldest running step would have run
// max(factor x the median of recent training steps, floor). A step still
// running then is stalled: the watch asks every task of the step what it
// waits on (GetStepState, each call bounded by probe_timeout, since a
// stopped task never answers), composes the one-line diagnosis
// (master/hang_diagnosis.h), publishes it at once (JobStatus.diagnosis,
// diagnosis_active) through `publish`, and logs it, once per distinct
// finding, with every answering task's last steps. It asks again every
// renew_every while the step stays stalled. When the step ends, the
// diagnosis stays, marked inactive, and the log says how the step ended.
// Steps that run fine cost the watch's thread one wake-up per `floor` at
// most, and the steps a map update under one mutex each.
//
// Thread-safety: thread-safe. The destructor stops the thread, waiting for a
// probe under way (at most probe_timeout); `workers` outlives the watch.
#ifndef WEFT_MASTER_STEP_WATCH_H_
#define WEFT_MASTER_STEP_WATCH_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "master/hang_diagnosis.h"
#include "common/metrics.h"
#include "master/step_observer.h"
#include "master/step_times.h"
#include "master/worker_cache.h"
#include "proto/master_service.pb.h"

namespace weft {
namespace master {

struct StepWatchOptions {
  // A step is stalled once it has run max(factor x the median of the recent
  // training steps, floor).
  double factor = 10;
  absl::Duration floor = absl::Seconds(5);
  // How long each task may take to answer GetStepState.
  absl::Duration probe_timeout = absl::Seconds(2);
  // While a step stays stalled, the diagnosis is renewed this often.
  absl::Duration renew_every = absl::Seconds(5);
  // The per-task step times are published at most this often.
  absl::Duration publish_every = absl::Seconds(1);
};

// Applies a change to the job's status (JobRunnerOptions::update_status).
using JobStatusUpdater = std::function<void(const std::function<void(JobStatus*)>&)>;

class StepWatch final : public StepObserver {
 public:
  // `job`: the job's name, for the log. `publish` applies a change and
  // publishes it at once; `amend` applies one that the next progress update
  // publishes. Either may be null.
  StepWatch(std::string job, WorkerCacheInterface* workers, StepWatchOptions options, JobStatusUpdater publish,
            JobStatusUpdater amend);
  ~StepWatch() override;
  StepWatch(const StepWatch&) = delete;
  StepWatch& operator=(const StepWatch&) = delete;

  // The tasks among which stragglers are judged (the replicas'); empty: all.
  void SetPeers(const std::vector<std::string>& tasks);
  // The job has trained `step` steps (its progress), for the diagnosis's
  // step number.
  void NoteProgress(int64_t step);

  void StepStarted(const StepInfo& step) override;
  // Also feed each task's step times to /metrics as
  // weft_task_step_duration_seconds{job=job_id, task} (docs/observability.md).
  void ExportMetrics(const std::string& job_id);

  void RunGraphDone(int64_t step_id, const std::string& task, absl::Duration elapsed,
                    const absl::Status& status) override;
  void StepEnded(int64_t step_id, const absl::Status& status) override;

 private:
  static constexpr int kRecentSteps = 64;

  struct Running {
    StepInfo info;
    uint64_t done = 0;  // bit i: the RunGraph of (*info.tasks)[i] has returned
    int64_t job_step = 0;
    absl::Time next_probe;  // InfinitePast until the first probe
  };
  // What a probe needs, copied out of the lock.
  struct Probe {
    StalledStep step;
    std::vector<std::string> tasks;
    uint64_t done = 0;
    // The step times as of now: no step ends while one is stalled, so the
    // diagnosis brings them up to date.
    std::vector<TaskStepTime> times;
  };

  void Loop();
  // The oldest running step; null when none runs.
  Running* OldestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration ThresholdLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration MedianLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks every task of the step, then publishes and logs the diagnosis.
  void Diagnose(const Probe& probe);
  std::vector<TaskAnswer> Ask(const std::vector<std::string>& tasks);
  // The diagnosed step ended: the diagnosis goes inactive.
  // `what`: "step 812", "checkpoint of step 800".
  void Resolved(const std::string& what, absl::Duration ran, const absl::Status& status);
  void PublishTimesLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string job_;
  WorkerCacheInterface* const workers_;
  const StepWatchOptions options_;
  const JobStatusUpdater publish_;
  const JobStatusUpdater amend_;

  absl::Mutex mu_;
  std::string metrics_job_ ABSL_GUARDED_BY(mu_);  // empty: no series
  std::map<std::string, metrics::Histogram*> task_seconds_ ABSL_GUARDED_BY(mu_);
  absl::CondVar changed_;  // a first running step, a diagnosed step's end, or stopping_
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool idle_ ABSL_GUARDED_BY(mu_) = false;  // the thread waits for a first step
  absl::flat_hash_map<int64_t, Running> running_ ABSL_GUARDED_BY(mu_);
  int64_t job_step_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::string> peers_ ABSL_GUARDED_BY(mu_);
  StepTimes times_ ABSL_GUARDED_BY(mu_);
  absl::Time last_times_publish_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // The last training steps' durations (whole RunGraph calls), a ring.
  std::array<double, kRecentSteps> recent_ ABSL_GUARDED_BY(mu_){};
  int recent_size_ ABSL_GUARDED_BY(mu_) = 0;
  int recent_next_ ABSL_GUARDED_BY(mu_) = 0;
  // The step the active diagnosis names (0: none), and how it ended once it
  // has (for the thread to report).
  int64_t diagnosed_step_ ABSL_GUARDED_BY(mu_) = 0;
  std::string diagnosed_what_ ABSL_GUARDED_BY(mu_);  // for Resolved
  absl::Time diagnosed_start_ ABSL_GUARDED_BY(mu_);
  bool diagnosed_ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status diagnosed_status_ ABSL_GUARDED_BY(mu_);
  std::string last_key_;  // the thread's only
  std::thread thread_;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_STEP_WATCH_H_
