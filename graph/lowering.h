// Lowering: a JobSpec's model (layers, graph/model_lowering.h, or a raw
// graph) becomes one replica's training graph.
//
// For a layer model the graph holds:
//   features (Placeholder float32 [?, input_shape...]), labels (int32 [?]),
//   a training forward pass (dropout on, batch statistics) ending in `loss`
//   (mean sparse softmax cross-entropy), its gradients, one optimizer update
//   per trainable variable, the moving-statistics updates of batch norm,
//   and `train` (a NoOp grouping all the updates); and an evaluation forward
//   pass sharing the variables (no dropout, moving statistics) ending in
//   `correct` (number of correct predictions in the batch) and `eval_loss`
//   (summed loss of the batch), and, when the job's eval.top_k > 1,
//   `correct_top_k` (InTopK: predictions whose label is among the k
//   largest logits).
// A final softmax activation is left out of the logits that the loss reads,
// since the loss applies softmax itself.
//
// Each update runs after every op of the training step that reads its
// variable (control edges), so an update never races with a read.
#ifndef WEFT_GRAPH_LOWERING_H_
#define WEFT_GRAPH_LOWERING_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/builder.h"
#include "graph/graph.h"
#include "graph/ops/lr_schedule.h"
#include "proto/job.pb.h"

namespace weft {

struct TrainingGraph {
  std::unique_ptr<Graph> graph;
  std::string features;   // tensor fed with a float32 batch
  std::string labels;     // tensor fed with int32 labels
  std::string loss;       // scalar mean loss of the batch
  std::string train_op;   // node run for its effect each step
  std::string correct;    // scalar: correct predictions in a batch ("" if none)
  std::string eval_loss;  // scalar: summed loss of a batch, without dropout ("" if none)
  std::string correct_top_k;  // scalar: predictions right within eval.top_k ("" if none)
  std::vector<std::string> variables;  // trainable variables, in creation order
  TensorShape example_shape;           // shape of one example
};

// Adds optimizer updates for `vars` given their gradients, and a NoOp named
// `train_op_name` grouping them; every update also gets `update_attrs`
// (skip_nonfinite under loss scaling). Exposed for raw graphs and tests.
absl::StatusOr<Node*> AddOptimizer(GraphBuilder* b, const OptimizerSpec& spec, const std::vector<Output>& vars,
                                   const std::vector<Output>& grads, const std::vector<Output>& step_outputs,
                                   const std::string& train_op_name, const AttrList& update_attrs = {});

absl::StatusOr<TrainingGraph> LowerJob(const JobSpec& job);

// The learning-rate schedule a layer model's optimizer applies (defaults
// filled in, a cosine decay's length resolved from the job's steps): what
// each update's rate is at its count t, which under synchronous strategies is
// the global step.
absl::StatusOr<LrSchedule> LearningRateOf(const JobSpec& job);

}  // namespace weft

#endif  // WEFT_GRAPH_LOWERING_H_
