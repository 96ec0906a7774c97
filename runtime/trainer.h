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
#include "runtime/training_loop.h"

namespace weft {

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
  // How a step and an evaluation batch run in this process.
  TrainingLoopHooks Hooks(const std::function<void(const TrainProgress&)>& on_progress);
  std::unique_ptr<State> s_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace weft

#endif  // WEFT_RUNTIME_TRAINER_H_
