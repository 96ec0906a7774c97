// The training loop that `weft train` and the master's jobs share.
//
// RunTrainingLoop walks a job's epochs or steps over the training split
// (seeded shuffle, batches, prefetch), runs one step per batch through
// `hooks.step`, which returns the batch's loss, and evaluates as the job asks
// and at the end through `hooks.evaluate`. It reports progress after every
// step and stops, with state CANCELLED, once `*hooks.cancelled` is set. Only
// how a step and an evaluation batch run differs between the two callers: an
// executor in this process, or a MasterSession over a cluster.
//
// Thread-safety: a call runs on the caller's thread; `cancelled` may be set
// from any thread.
#ifndef WEFT_RUNTIME_TRAINING_LOOP_H_
#define WEFT_RUNTIME_TRAINING_LOOP_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "common/json_text.h"
#include "absl/strings/string_view.h"
#include "proto/job.pb.h"
#include "proto/job.pb.h"
#include "runtime/data/dataset.h"

namespace weft {

struct TrainProgress {
  int64_t step = 0;         // steps done
  int64_t total_steps = 0;
  int64_t epoch = 0;        // current epoch, from 1
  int64_t epochs = 0;       // epochs in the job (0 when the job counts steps)
  double loss = 0;          // mean loss over the current epoch so far
  double samples_per_second = 0;
  double elapsed_seconds = 0;
  bool epoch_end = false;   // set on the update that closes an epoch
  double test_accuracy = -1;  // when an evaluation just ran
  double test_loss = -1;      // likewise (a regression has a loss and no accuracy)
};

// Accuracy and loss are means over the predictions: one per example, or
// one per position of a sequence model's examples (a TEXT dataset's), which
// `examples` then counts.
struct EvalResult {
  double accuracy = 0;  // -1 for a model without classes (a regression)
  double loss = 0;
  int64_t examples = 0;
  // Fraction whose label is among the k largest logits (the job's
  // eval.top_k); -1 when not computed.
  double top_k_accuracy = -1;
};

// One evaluation batch's sums (TrainingLoopHooks::eval_batch).
struct EvalCounts {
  double correct = 0;         // correct predictions; -1: not computed (a regression)
  double loss = 0;            // summed loss
  double correct_top_k = -1;  // predictions right within the top k; -1: not computed
};

struct TrainResult {
  // SUCCEEDED or CANCELLED (the master's jobs also PREEMPTED); UNSPECIFIED
  // only while the loop runs.
  JobState state = JOB_STATE_UNSPECIFIED;
  std::string job;
  int64_t steps = 0;
  int64_t epochs = 0;              // epochs completed (fractional runs round down)
  double train_loss = 0;           // mean loss over the last epoch's steps
  double test_accuracy = -1;       // -1 when evaluation was skipped
  double test_loss = -1;
  int64_t test_examples = 0;
  double test_top_k_accuracy = -1;  // -1 unless the job sets eval.top_k > 1
  // exp(test_loss), the model's perplexity per byte, for a TEXT dataset
  // (whose loss is nats per byte); -1 for other datasets or without an
  // evaluation.
  double test_perplexity = -1;
  // Training steps only, and not the run's first call of steps when more
  // follow: that call pays for the run's setup (a distributed job registers
  // its partitions, its workers load their shards and initialise variables),
  // which a peer such as PyTorch DDP does before its timed loop.
  double samples_per_second = 0;
  double warmup_seconds = 0;       // the first call's time, left out of samples_per_second
  double wall_seconds = 0;         // the whole run, loading and evaluation included

  // One JSON object with every field above.
  std::string ToJson() const;
  // ", test accuracy A, test top-k accuracy K, test perplexity P" for the
  // figures that were computed (>= 0), or ", test loss L" for a model
  // evaluated without accuracy (a regression: its mean squared error), for
  // a human summary line; "" when nothing was evaluated.
  std::string TestMetrics() const;
};

// JsonString, for ToJson's users: common/json_text.h.

struct TrainingLoopHooks {
  // Runs one training step on `batch`; returns its loss.
  std::function<absl::StatusOr<float>(const data::Batch& batch)> step;
  // Runs one evaluation batch; returns its sums. Null: the job is not
  // evaluated.
  std::function<absl::StatusOr<EvalCounts>(const data::Batch& batch)> eval_batch;
  // Told the batch the step after the coming one trains on, before that
  // step runs, so that it may start copying it (a GPU's recorded step);
  // null: batches are not looked ahead at.
  std::function<void(const data::Batch& next)> next_batch;
  std::function<void(const TrainProgress&)> on_progress;  // may be null
  const std::atomic<bool>* cancelled = nullptr;           // may be null
};

// Where a loop's steps come from when the data is not in this process (the
// replicas of a distributed job read their own shards on their tasks).
struct StepResult {
  float loss = 0;        // the (last) step's loss
  int64_t examples = 0;  // examples the steps trained on
  int64_t steps = 1;     // steps run (several with steps_per_execution)
};
struct StepSource {
  int64_t examples = 0;           // training examples in an epoch
  int64_t batches_per_epoch = 0;  // steps in an epoch
  // Runs at least one and at most `max_steps` steps (the rest of the epoch
  // or of the job).
  std::function<absl::StatusOr<StepResult>(int64_t max_steps)> step;
  std::function<absl::StatusOr<EvalResult>()> evaluate;  // null: not evaluated
  // Steps already trained (a job resumed from a checkpoint of that step):
  // the loop starts there, in the epoch it falls in.
  int64_t start_step = 0;
  // Called after the steps of each call (and after the evaluation that
  // closes an epoch), with the steps done so far: the place for checkpoints.
  // An error ends the loop with it. May be null.
  std::function<absl::Status(int64_t step)> after_steps;
  // The loop's clock for its throughput; null: std::chrono::steady_clock.
  std::function<std::chrono::steady_clock::time_point()> now;
};

// The loop over steps from `source`: epochs, progress, evaluation, cancel.
absl::StatusOr<TrainResult> RunTrainingLoop(const JobSpec& job, const StepSource& source,
                                            const std::function<void(const TrainProgress&)>& on_progress,
                                            const std::atomic<bool>* cancelled,
                                            std::chrono::steady_clock::time_point started);

// Trains `job` on `train`, evaluating on `test` (may be empty). `started` is
// when the run began (loading included), for wall_seconds.
absl::StatusOr<TrainResult> RunTrainingLoop(const JobSpec& job, const data::InMemoryDataset& train,
                                            const data::InMemoryDataset& test, const TrainingLoopHooks& hooks,
                                            std::chrono::steady_clock::time_point started);

// Accuracy and mean loss over all of `test`, in batches of 500.
absl::StatusOr<EvalResult> EvaluateDataset(const JobSpec& job, const data::InMemoryDataset& test,
                                           const TrainingLoopHooks& hooks);

}  // namespace weft

#endif  // WEFT_RUNTIME_TRAINING_LOOP_H_
