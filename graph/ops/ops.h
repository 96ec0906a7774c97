// Typed C++ wrappers over GraphBuilder::Op for the math, NN, array and
// training ops (graph/ops/*_ops.cc define them; their comments are the
// reference for semantics).
//
//   Output h = ops::Relu(&b, ops::BiasAdd(&b, ops::MatMul(&b, x, w), bias));
//
// Each wrapper adds one node and returns its output(s); like every builder
// call, after an error it returns invalid Outputs and b->status() holds the
// error. `name` defaults to the op's name (scoped and made unique).
//
// Thread-safety: as GraphBuilder (not thread-safe).
#ifndef WEFT_GRAPH_OPS_OPS_H_
#define WEFT_GRAPH_OPS_OPS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/attr.h"
#include "graph/builder.h"

namespace weft {
namespace ops {

// ---- Math (math_ops.cc) -----------------------------------------------------

inline Output MatMul(GraphBuilder* b, Output a, Output x, bool transpose_a = false, bool transpose_b = false,
                     absl::string_view name = "") {
  return b->Op("MatMul", {a, x}, {Attr("transpose_a", transpose_a), Attr("transpose_b", transpose_b)}, name);
}
inline Output BiasAdd(GraphBuilder* b, Output x, Output bias, absl::string_view name = "") {
  return b->Op("BiasAdd", {x, bias}, {}, name);
}
inline Output BiasAddGrad(GraphBuilder* b, Output g, absl::string_view name = "") {
  return b->Op("BiasAddGrad", {g}, {}, name);
}
inline Output Add(GraphBuilder* b, Output x, Output y, absl::string_view name = "") {
  return b->Op("Add", {x, y}, {}, name);
}
inline Output Sub(GraphBuilder* b, Output x, Output y, absl::string_view name = "") {
  return b->Op("Sub", {x, y}, {}, name);
}
inline Output Mul(GraphBuilder* b, Output x, Output y, absl::string_view name = "") {
  return b->Op("Mul", {x, y}, {}, name);
}
inline Output Neg(GraphBuilder* b, Output x, absl::string_view name = "") { return b->Op("Neg", {x}, {}, name); }
inline Output AddN(GraphBuilder* b, absl::Span<const Output> xs, absl::string_view name = "") {
  return b->Op("AddN", xs, {}, name);
}
inline Output Sum(GraphBuilder* b, Output x, absl::string_view name = "") { return b->Op("Sum", {x}, {}, name); }
inline Output Mean(GraphBuilder* b, Output x, absl::string_view name = "") { return b->Op("Mean", {x}, {}, name); }
inline Output SumGrad(GraphBuilder* b, Output g, Output x, absl::string_view name = "") {
  return b->Op("SumGrad", {g, x}, {}, name);
}
inline Output MeanGrad(GraphBuilder* b, Output g, Output x, absl::string_view name = "") {
  return b->Op("MeanGrad", {g, x}, {}, name);
}
inline Output ScaleRows(GraphBuilder* b, Output m, Output s, absl::string_view name = "") {
  return b->Op("ScaleRows", {m, s}, {}, name);
}
inline Output RowDot(GraphBuilder* b, Output x, Output y, absl::string_view name = "") {
  return b->Op("RowDot", {x, y}, {}, name);
}
inline Output ArgMax(GraphBuilder* b, Output x, absl::string_view name = "") {
  return b->Op("ArgMax", {x}, {}, name);
}
inline Output Equal(GraphBuilder* b, Output x, Output y, absl::string_view name = "") {
  return b->Op("Equal", {x, y}, {}, name);
}
inline Output Cast(GraphBuilder* b, Output x, DType dtype, absl::string_view name = "") {
  return b->Op("Cast", {x}, {Attr("dtype", dtype)}, name);
}

// ---- Neural-network ops (nn_ops.cc) -----------------------------------------

inline Output Relu(GraphBuilder* b, Output x, absl::string_view name = "") { return b->Op("Relu", {x}, {}, name); }
inline Output ReluGrad(GraphBuilder* b, Output g, Output x, absl::string_view name = "") {
  return b->Op("ReluGrad", {g, x}, {}, name);
}
inline Output Sigmoid(GraphBuilder* b, Output x, absl::string_view name = "") {
  return b->Op("Sigmoid", {x}, {}, name);
}
inline Output SigmoidGrad(GraphBuilder* b, Output y, Output g, absl::string_view name = "") {
  return b->Op("SigmoidGrad", {y, g}, {}, name);
}
inline Output Tanh(GraphBuilder* b, Output x, absl::string_view name = "") { return b->Op("Tanh", {x}, {}, name); }
inline Output TanhGrad(GraphBuilder* b, Output y, Output g, absl::string_view name = "") {
  return b->Op("TanhGrad", {y, g}, {}, name);
}
inline Output Softmax(GraphBuilder* b, Output x, absl::string_view name = "") {
  return b->Op("Softmax", {x}, {}, name);
}
inline Output SoftmaxGrad(GraphBuilder* b, Output y, Output g, absl::string_view name = "") {
  return b->Op("SoftmaxGrad", {y, g}, {}, name);
}

struct XentOutputs {
  Output loss;      // [N] per-example cross entropy
  Output backprop;  // [N, C] softmax(logits) - one_hot(labels)
};
inline XentOutputs SparseSoftmaxCrossEntropyWithLogits(GraphBuilder* b, Output logits, Output labels,
                                                       absl::string_view name = "") {
  Node* n = b->AddNode("SparseSoftmaxCrossEntropyWithLogits", {logits, labels}, {}, name);
  if (n == nullptr) return {};
  return {Output(n, 0), Output(n, 1)};
}

// `padding` is "SAME" or "VALID".
inline Output Conv2D(GraphBuilder* b, Output x, Output filter, int64_t stride = 1,
                     absl::string_view padding = "VALID", absl::string_view name = "") {
  return b->Op("Conv2D", {x, filter}, {Attr("stride", stride), Attr("padding", std::string(padding))}, name);
}
inline Output Conv2DBackpropInput(GraphBuilder* b, Output x, Output filter, Output g, int64_t stride = 1,
                                  absl::string_view padding = "VALID", absl::string_view name = "") {
  return b->Op("Conv2DBackpropInput", {x, filter, g},
               {Attr("stride", stride), Attr("padding", std::string(padding))}, name);
}
inline Output Conv2DBackpropFilter(GraphBuilder* b, Output x, Output filter, Output g, int64_t stride = 1,
                                   absl::string_view padding = "VALID", absl::string_view name = "") {
  return b->Op("Conv2DBackpropFilter", {x, filter, g},
               {Attr("stride", stride), Attr("padding", std::string(padding))}, name);
}
// stride 0 means "same as ksize".
inline Output MaxPool(GraphBuilder* b, Output x, int64_t ksize, int64_t stride = 0,
                      absl::string_view padding = "VALID", absl::string_view name = "") {
  return b->Op("MaxPool", {x},
               {Attr("ksize", ksize), Attr("stride", stride == 0 ? ksize : stride),
                Attr("padding", std::string(padding))},
               name);
}

struct DropoutOutputs {
  Output y;     // x * mask
  Output mask;  // 1/(1-rate) where kept, 0 where dropped
};
inline DropoutOutputs Dropout(GraphBuilder* b, Output x, float rate, int64_t seed = 0, absl::string_view name = "") {
  Node* n = b->AddNode("Dropout", {x}, {Attr("rate", rate), Attr("seed", seed)}, name);
  if (n == nullptr) return {};
  return {Output(n, 0), Output(n, 1)};
}

// ---- Array ops (array_ops.cc) -----------------------------------------------

// At most one dim of `shape` may be -1 (inferred at run time).
inline Output Reshape(GraphBuilder* b, Output x, const std::vector<int64_t>& shape, absl::string_view name = "") {
  return b->Op("Reshape", {x}, {Attr("shape", shape)}, name);
}
inline Output ReshapeLike(GraphBuilder* b, Output x, Output like, absl::string_view name = "") {
  return b->Op("ReshapeLike", {x, like}, {}, name);
}

// ---- Optimizers (training_ops.cc); each returns the updated variable ---------

inline Output ApplyGradientDescent(GraphBuilder* b, Output var, Output grad, float learning_rate,
                                   absl::string_view name = "") {
  return b->Op("ApplyGradientDescent", {var, grad}, {Attr("learning_rate", learning_rate)}, name);
}
inline Output ApplyMomentum(GraphBuilder* b, Output var, Output accum, Output grad, float learning_rate,
                            float momentum, bool use_nesterov = false, absl::string_view name = "") {
  return b->Op("ApplyMomentum", {var, accum, grad},
               {Attr("learning_rate", learning_rate), Attr("momentum", momentum), Attr("use_nesterov", use_nesterov)},
               name);
}
inline Output ApplyAdam(GraphBuilder* b, Output var, Output m, Output v, Output t, Output grad, float learning_rate,
                        float beta1 = 0.9f, float beta2 = 0.999f, float epsilon = 1e-7f, absl::string_view name = "") {
  return b->Op("ApplyAdam", {var, m, v, t, grad},
               {Attr("learning_rate", learning_rate), Attr("beta1", beta1), Attr("beta2", beta2),
                Attr("epsilon", epsilon)},
               name);
}

}  // namespace ops
}  // namespace weft

#endif  // WEFT_GRAPH_OPS_OPS_H_
