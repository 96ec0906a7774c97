// The training pass of a model job (graph/lowering.cc): the loss over the
// step's batch and the gradients of the model's variables, written either
// as one pass or, with optimizer.gradient_accumulation_steps k > 1, as k
// passes over micro-batches of batch / k rows, one after another.
//
// Each micro-batch pass slices the features and labels (MicroBatch), runs
// the model's training forward pass on its rows (the same variables), and
// takes its own gradients at once; a control edge from every gradient of
// pass i to pass i + 1's slices keeps the passes in sequence, so a step holds one
// micro-batch's activations at a time. The loss and each gradient are the
// means over the passes: for equal micro-batches, the whole batch's mean
// loss and its gradient (up to rounding), unless a layer's statistics
// depend on the rows together (batch norm normalises each micro-batch
// with its own, as every framework's gradient accumulation does).
//
// Thread-safety: as GraphBuilder.
#ifndef WEFT_GRAPH_TRAINING_PASS_H_
#define WEFT_GRAPH_TRAINING_PASS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/builder.h"
#include "graph/model_lowering.h"
#include "proto/job.pb.h"

namespace weft {

// The logits of `features` from the model's output (the last layer's
// logits, or a [batch, positions, classes] sequence's as rows of classes).
absl::StatusOr<Output> Predictions(GraphBuilder* b, Output logits, int64_t num_classes, const char* name);

// The mean of `terms` as node `name` (AddN, then a Mul by 1 / n), or the one
// term itself when alone.
Output MeanOf(GraphBuilder* b, const std::vector<Output>& terms, const std::string& name);

class TrainingPass {
 public:
  // INVALID_ARGUMENT for a negative k, or a batch_size that k does not
  // divide.
  static absl::StatusOr<TrainingPass> Forward(const JobSpec& job, GraphBuilder* b, ModelLowering* lower,
                                              Output features, Output labels);

  // The gradients of `vars`, the model's variables: for one pass written
  // now (after whatever the caller added since Forward, as the one-pass
  // graph always had them), for micro-batches the means of the passes'.
  absl::StatusOr<std::vector<Output>> Gradients(GraphBuilder* b, const std::vector<Output>& vars);

  // The training loss (the mean over the micro-batches').
  Output loss() const { return loss_; }

 private:
  std::vector<Output> losses_;       // one per pass
  std::vector<std::vector<Output>> grads_;  // per micro-batch pass (none for one pass)
  Output loss_;
};

}  // namespace weft

#endif  // WEFT_GRAPH_TRAINING_PASS_H_
