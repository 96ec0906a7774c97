// One forward pass of a job's layer model (proto/job.proto's ModelSpec):
// a stack of layers, or a graph of them where layers name their inputs
// (residual blocks). graph/lowering.cc builds the training graph from two
// passes: a training pass (dropout on, batch statistics) and an evaluation
// pass sharing its variables (dropout off, moving statistics). Layer norm
// takes each example's own statistics, the same in both passes.
//
// Thread-safety: used by one thread.
#ifndef WEFT_GRAPH_MODEL_LOWERING_H_
#define WEFT_GRAPH_MODEL_LOWERING_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/builder.h"
#include "proto/job.pb.h"

namespace weft {

class ModelLowering {
 public:
  // `job` and `b` must outlive the lowering.
  ModelLowering(const JobSpec& job, GraphBuilder* b) : job_(job), model_(job.model()), b_(b) {}

  // Checks the layers' names and inputs: unique names, inputs naming
  // earlier layers or "input", one input per layer except the two or more
  // of add and concatenate.
  absl::Status CheckTopology();

  // Adds one forward pass reading `x`; returns the last layer's output
  // (logits, before a final softmax, which the loss applies). The training
  // pass must come first: it creates the variables the evaluation pass
  // reuses.
  absl::StatusOr<Output> Forward(Output x, bool training);

  // Trainable variables, in creation order.
  const std::vector<Output>& variables() const { return variables_; }
  // The moving-statistics updates (ApplyMovingAverage) to run with each
  // training step, one per statistic, of the mean of the training passes'
  // batch statistics (one pass per micro-batch with gradient accumulation).
  // Call once, after every training pass is written.
  absl::StatusOr<std::vector<Node*>> MovingAverageUpdates();

 private:
  // A layer's variables, created by the training pass.
  struct LayerVars {
    Output kernel, bias;                      // dense, conv2d
    Output gamma, beta, moving_mean, moving_var;  // batch_norm (layer_norm: gamma, beta)
    // multi_head_attention: the q, k, v projections (kernel and bias: the output one)
    Output query_kernel, query_bias, key_kernel, key_bias, value_kernel, value_bias;
    Output embeddings;                        // embedding, position_embedding
    Output recurrent_kernel;                  // lstm, gru (with kernel and bias)
  };

  absl::Status LowerLayer(int i, bool last, bool training, const std::vector<Output>& in, Output* out);
  absl::Status Dense(int i, bool last, Output* x);
  absl::Status Conv2D(int i, bool last, Output* x);
  absl::Status MaxPool(int i, Output* x);
  absl::Status Reshape(int i, Output* x);
  absl::Status ScaleAndShift(int i, const char* kind, const Output& x, bool moving);
  absl::Status BatchNorm(int i, bool last, bool training, Output* x);
  absl::Status LayerNorm(int i, bool last, Output* x);
  // graph/embedding_lowering.cc
  absl::Status Embedding(int i, Output* x);
  absl::Status PositionEmbedding(int i, Output* x);
  // graph/attention_lowering.cc
  absl::Status MultiHeadAttention(int i, Output* x);
  absl::Status Add(int i, bool last, const std::vector<Output>& in, Output* out);
  // graph/recurrent_lowering.cc
  absl::Status Recurrent(int i, Output* x);  // lstm, gru
  // graph/join_lowering.cc
  absl::Status AvgPool(int i, Output* x);
  absl::Status Concatenate(int i, const std::vector<Output>& in, Output* out);
  absl::Status Error(int i, absl::string_view msg) const;
  std::string LayerName(int i) const;
  void Track(Output v) { variables_.push_back(v); }

  const JobSpec& job_;
  const ModelSpec& model_;
  GraphBuilder* b_;
  std::vector<LayerVars> vars_;
  std::vector<Output> variables_;
  // A moving statistic and its batch value in each training pass.
  struct MovingStat {
    Output var;
    std::vector<Output> values;
    float momentum = 0.99f;
  };
  std::vector<MovingStat> moving_;
  // Per layer, the indexes of the layers it reads (-1: the model's input).
  std::vector<std::vector<int>> inputs_;
};

}  // namespace weft

#endif  // WEFT_GRAPH_MODEL_LOWERING_H_
