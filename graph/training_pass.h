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

// What a sequential model's loss compares its outputs with: class labels
// (int32, one per example or position; `width` = num_classes, 2 for
// BINARY_CROSS_ENTROPY's one logit) or, for
// MEAN_SQUARED_ERROR, float targets (`width` per example: a SERIES
// dataset's horizon). INVALID_ARGUMENT, naming the field, for an unknown
// loss, a regression on a dataset without float targets, or num_classes
// that does not suit the loss.
struct LossTargets {
  bool regression = false;
  bool binary = false;  // BINARY_CROSS_ENTROPY: one logit, classes 0 and 1
  int64_t width = 0;
};
absl::StatusOr<LossTargets> LossTargetsOf(const JobSpec& job);

// One pass's loss terms for the model's `outputs`: the per-example (or
// per-position) cross-entropies of the logits as rows, or the squared
// errors of every target, flat; their Mean is the pass's loss and their Sum
// the evaluation's. Nodes are named `prefix` + logits, xent (or outputs,
// diff, squares).
struct LossTerms {
  Output rows;   // the logits as [rows, classes] (classification only; [z] as [0, z] for binary)
  Output terms;  // [rows] cross-entropies, or [targets] squared errors
};
absl::StatusOr<LossTerms> AddLossTerms(GraphBuilder* b, const LossTargets& targets, Output outputs, Output labels,
                                       const std::string& prefix);

// The mean of `terms` as node `name` (AddN, then a Mul by 1 / n), or the one
// term itself when alone.
Output MeanOf(GraphBuilder* b, const std::vector<Output>& terms, const std::string& name);

class TrainingPass {
 public:
  // INVALID_ARGUMENT for a negative k, or a batch_size that k does not
  // divide.
  // With a valid `loss_scale` (graph/mixed_precision.h) the gradients are
  // those of loss * loss_scale; loss() stays unscaled.
  static absl::StatusOr<TrainingPass> Forward(const JobSpec& job, GraphBuilder* b, ModelLowering* lower,
                                              Output features, Output labels, Output loss_scale = Output());

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
  Output loss_scale_;  // invalid without loss scaling
};

}  // namespace weft

#endif  // WEFT_GRAPH_TRAINING_PASS_H_
