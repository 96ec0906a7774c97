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

struct LocalTrainerOptions {
  // GPUs this process may use: 0 none, -1 as many as it sees. Only one is
  // used today. The job's `device` setting applies on top.
  int max_gpus = -1;
  // On a GPU, record a steady step as a CUDA graph and replay it (ExecutorOptions::record_device_steps).
  bool cuda_graphs = true;
};

class LocalTrainer {
 public:
  // Lowers the job and loads its data; errors name the job field, layer,
  // node or file at fault. With a GPU (built with CUDA, one visible, allowed
  // by `options` and job.device), the graph is placed on the GPU and the CPU
  // (ops without a GPU kernel, the fed placeholders) and run as one
  // partition per device, meeting in a per-step rendezvous; a fed tensor
  // whose consumers are all on the GPU is fed to the GPU's partition
  // directly, so that a step without CPU work is one GPU partition, which
  // options.cuda_graphs records.
  static absl::StatusOr<std::unique_ptr<LocalTrainer>> Create(const JobSpec& job,
                                                              const LocalTrainerOptions& options = {});
  // The devices the training step runs on, e.g. "CPU:0" or "CPU:0,GPU:0".
  std::string DeviceSummary() const;
  ~LocalTrainer();

  // Trains to the job's epochs or steps, evaluating as the job asks and at
  // the end. `on_progress` (optional) is called after every step.
  absl::StatusOr<TrainResult> Train(const std::function<void(const TrainProgress&)>& on_progress = nullptr);
  // Accuracy and loss on the whole test split.
  absl::StatusOr<EvalResult> Evaluate();
  // Training steps replayed from a recording of an earlier one (a CUDA
  // graph, options.cuda_graphs); 0 without a GPU.
  int64_t ReplayedTrainingSteps() const;
  // Those of them whose batch was copied to the device during the step before.
  int64_t TrainingStepsCopiedAhead() const;
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
