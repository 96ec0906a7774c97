// JobSummaries: a job's TensorBoard event files, written by the master from
// the progress and results it already receives (README "TensorBoard").
//
// A job with `summary { dir every_steps }` gets the run directory
// <summary.dir>/<job id>, one run per job, and in it one event file per
// (re)start of its runner (runtime/summary_writer.h): a job resumed by a
// restarted master adds a file to the same run, and TensorBoard merges them.
// Tags, all scalars:
//   train/loss                 mean loss of the current epoch so far, the
//                              figure JobStatus.loss reports at that step
//   train/samples_per_second   training throughput so far (JobStatus's)
//   train/step_time_seconds    wall seconds per step since the previous
//                              summary, evaluation excluded; a run's first
//                              update (its time includes the start, or a
//                              recovery) is left out, so with every_steps
//                              1 the first summary has none
//   train/learning_rate        the optimizer's rate at the step, with its
//                              schedule (layer models only: a raw graph's
//                              is inside its graph)
//   eval/accuracy              after each evaluation (eval.every_epochs)
//                              and at the end, at the step evaluated
//   eval/loss                  at the end (progress carries no eval loss)
//   eval/top_k_accuracy,       at the end, when computed (the job's eval.top_k;
//   eval/perplexity            a TEXT dataset's exp(eval loss))
// Training scalars are written when the step reaches a multiple of
// every_steps (0: kDefaultSummaryEverySteps) and at the job's last step.
// There is no train/accuracy: training steps report no accuracy.
//
// Confinement (docs/security.md): summary.dir lies under the master's
// checkpoint root, relative to it or absolute inside it, like
// checkpoint.dir. Submit refuses one outside it, with "..", or with a
// symbolic link (or a non-directory) on the part that exists; the run
// directory and file are reached by the same no-link walk from the root
// (ConfinedRoot::Resolve) when the job starts, directories created 0700 and
// files 0600. Without a root (in-process tests) the directory is used as
// given.
//
// Failures: event files are a view of the job, not part of it. A file that
// cannot be created or written is logged as an error naming the job and the
// file, and the job trains on without summaries from then on.
//
// Thread-safety: not thread-safe; the job's runner thread makes every call.
#ifndef WEFT_MASTER_JOB_SUMMARIES_H_
#define WEFT_MASTER_JOB_SUMMARIES_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/confined_root.h"
#include "common/env.h"
#include "graph/ops/lr_schedule.h"
#include "proto/job.pb.h"
#include "runtime/summary_writer.h"
#include "runtime/training_loop.h"

namespace weft {
namespace master {

// summary.every_steps when 0: TensorFlow Estimator's save_summary_steps.
inline constexpr int64_t kDefaultSummaryEverySteps = 100;

// What Submit checks of a job's summary policy on a master with a checkpoint
// root (OK when the job sets none): summary.dir inside the root, no symbolic
// link or non-directory on the part of it that exists, and not a checkpoint
// directory of another user (its OWNER file). Touches nothing. Errors start
// with "job: summary.dir": INVALID_ARGUMENT for a name outside the root or
// breaking its rules, PERMISSION_DENIED for a link or another's directory.
absl::Status CheckSummaryPolicy(const ConfinedRoot& root, const JobSpec& job, const std::string& owner);

class JobSummaries {
 public:
  // Opens a new event file in the job's run directory, creating what is
  // missing. Null when the job sets no summary policy. Errors name the file
  // or the directory.
  static absl::StatusOr<std::unique_ptr<JobSummaries>> Open(const JobSpec& job, const std::string& job_id,
                                                            const std::optional<ConfinedRoot>& root, Env* env);
  // Open for the job manager: never null. When the job sets no policy, or
  // Open fails (logged, naming the job), a JobSummaries that writes nothing.
  static std::unique_ptr<JobSummaries> OpenOrLog(const JobSpec& job, const std::string& job_id,
                                                 const std::optional<ConfinedRoot>& root, Env* env);

  JobSummaries(const JobSummaries&) = delete;
  JobSummaries& operator=(const JobSummaries&) = delete;

  // Every progress update of the job (JobRunner::Run's callback).
  void OnProgress(const TrainProgress& p);
  // The job's end: the final evaluation, the last training point of a run
  // that stopped between summaries; then the file is synced and closed.
  void OnResult(const absl::StatusOr<TrainResult>& result);

  // The event file; empty when writing nothing.
  std::string path() const;

 private:
  using Clock = std::chrono::steady_clock;
  JobSummaries(const JobSpec& job, std::string job_id, std::unique_ptr<SummaryWriter> writer);
  // Training scalars at `step`.
  void WriteTrain(int64_t step, double loss, double samples_per_second);
  // Writes, or logs the error and stops writing.
  void Write(int64_t step, absl::Span<const SummaryScalar> scalars);

  const std::string job_id_;
  const int64_t every_;
  const std::optional<LrSchedule> learning_rate_;  // unset: not known (raw graph)
  std::unique_ptr<SummaryWriter> writer_;     // null: writing nothing
  bool started_ = false;                      // a progress update was seen
  int64_t last_step_ = 0;                     // of the last training update
  int64_t last_train_step_ = -1;              // of the last training summary
  int64_t last_eval_step_ = -1;               // of the last eval/accuracy
  Clock::time_point last_update_;             // of the last update of any kind
  double window_seconds_ = 0;                 // since the last training summary
  int64_t window_steps_ = 0;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_JOB_SUMMARIES_H_
