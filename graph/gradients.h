// Reverse-mode automatic differentiation over a Graph.
//
// AddGradients walks back from a scalar loss to the requested tensors and
// adds, per op on the way, the nodes its gradient function builds. A node's
// gradient function receives the gradients of its outputs (an invalid Output
// for an output no gradient reaches) and fills the gradients of its inputs
// (invalid where none flows, e.g. integer labels). Gradients reaching one
// tensor along several paths are summed with AddN.
#ifndef WEFT_GRAPH_GRADIENTS_H_
#define WEFT_GRAPH_GRADIENTS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/builder.h"

namespace weft {

struct GradContext {
  GraphBuilder* builder;
  const Node* node;
  // The node's data inputs and outputs, as Outputs.
  std::vector<Output> inputs;
  std::vector<Output> outputs;
  // dLoss/d(output i); invalid when no gradient reaches output i. At least
  // one is valid whenever the function is called.
  std::vector<Output> grad_outputs;
  // To fill: dLoss/d(input i); leave invalid where no gradient flows.
  std::vector<Output> grad_inputs;
};

// Adds nodes computing d(loss)/d(x) for each x in `xs`. REQUIRES: loss is a
// float32 scalar. INVALID_ARGUMENT when some x does not affect the loss, or
// a path from x to the loss crosses an op with no gradient function.
absl::StatusOr<std::vector<Output>> AddGradients(GraphBuilder* builder, Output loss, absl::Span<const Output> xs);

}  // namespace weft

#endif  // WEFT_GRAPH_GRADIENTS_H_
