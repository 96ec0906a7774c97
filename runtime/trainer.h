// LocalTrainer: trains a job in this process.
//
// It lowers the job's model to a training graph, loads the data, builds one
// executor for the training step (feeds features and labels, fetches the
// loss, runs the train op) and one for evaluation, and drives them epoch by
// epoch. `weft train` is a thin shell around it.
//
// Thread-safety: not thread-safe; Cancel() may be called from any thread (or
// a signal handler, through the atomic flag it sets).
#ifndef WEFT_RUNTIME_TRAINER_H_
#define WEFT_RUNTIME_TRAINER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

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
};

struct EvalResult {
  double accuracy = 0;
  double loss = 0;
  int64_t examples = 0;
};

struct TrainResult {
  std::string state;  // SUCCEEDED or CANCELLED
  std::string job;
  int64_t steps = 0;
  int64_t epochs = 0;              // epochs completed (fractional runs round down)
  double train_loss = 0;           // mean loss over the last epoch's steps
  double test_accuracy = -1;       // -1 when evaluation was skipped
  double test_loss = -1;
  int64_t test_examples = 0;
  double samples_per_second = 0;   // training steps only
  double wall_seconds = 0;         // the whole run, loading and evaluation included

  // One JSON object with every field above.
  std::string ToJson() const;
};

class LocalTrainer {
 public:
  // Lowers the job and loads its data; errors name the job field, layer,
  // node or file at fault.
  static absl::StatusOr<std::unique_ptr<LocalTrainer>> Create(const JobSpec& job);
  ~LocalTrainer();

  // Trains to the job's epochs or steps, evaluating as the job asks and at
  // the end. `on_progress` (optional) is called after every step.
  absl::StatusOr<TrainResult> Train(const std::function<void(const TrainProgress&)>& on_progress = nullptr);
  // Accuracy and loss on the whole test split.
  absl::StatusOr<EvalResult> Evaluate();
  // Makes Train stop after the current step, with state CANCELLED.
  void Cancel() { cancelled_.store(true); }

 private:
  struct State;
  explicit LocalTrainer(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace weft

#endif  // WEFT_RUNTIME_TRAINER_H_
