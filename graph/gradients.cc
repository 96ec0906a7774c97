#include "graph/gradients.h"

#include <deque>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace weft {
namespace {

struct EndpointHash {
  size_t operator()(const Endpoint& e) const { return std::hash<const void*>()(e.node) * 31 + e.index; }
};

using PendingGrads = absl::flat_hash_map<Endpoint, std::vector<Output>, EndpointHash>;

// Nodes the loss depends on through data edges, by id.
std::vector<bool> NodesFeedingLoss(const Output& loss, int n) {
  std::vector<bool> to_loss(n, false);
  std::deque<Node*> queue{loss.node};
  to_loss[loss.node->id()] = true;
  while (!queue.empty()) {
    Node* cur = queue.front();
    queue.pop_front();
    for (const Endpoint& e : cur->inputs()) {
      if (!to_loss[e.node->id()]) {
        to_loss[e.node->id()] = true;
        queue.push_back(e.node);
      }
    }
  }
  return to_loss;
}

// Nodes that depend on some x, by id; ids are topological, so one forward
// sweep.
absl::Status NodesFedByXs(const Graph& g, absl::Span<const Output> xs, std::vector<bool>* from_x) {
  from_x->assign(g.num_nodes(), false);
  for (const Output& x : xs) {
    if (!x.valid()) return absl::InvalidArgumentError("AddGradients: an input tensor is not valid");
    (*from_x)[x.node->id()] = true;
  }
  for (int id = 0; id < g.num_nodes(); ++id) {
    if ((*from_x)[id]) continue;
    for (const Endpoint& e : g.node(id)->inputs()) {
      if ((*from_x)[e.node->id()]) {
        (*from_x)[id] = true;
        break;
      }
    }
  }
  return absl::OkStatus();
}

// The sum of the gradients reaching one tensor; invalid when none does.
Output SumOf(GraphBuilder* b, const std::vector<Output>& parts, const std::string& what) {
  if (parts.empty()) return Output();
  if (parts.size() == 1) return parts[0];
  return b->Op("AddN", parts, {}, absl::StrCat("gradients/", what, "/AddN"));
}

// Runs `node`'s gradient function on the summed gradients of its outputs
// and adds what it gives for the inputs that depend on an x to `pending`.
// Nothing to do when no gradient reaches the node or none of its inputs
// needs one.
absl::Status BackpropNode(GraphBuilder* b, Node* node, const std::vector<bool>& from_x, PendingGrads* pending) {
  GradContext ctx{b, node, {}, {}, {}, {}};
  bool any = false;
  for (int k = 0; k < node->num_outputs(); ++k) {
    auto it = pending->find(Endpoint{node, k});
    Output grad = it == pending->end() ? Output() : SumOf(b, it->second, node->name());
    any |= grad.valid();
    ctx.grad_outputs.push_back(grad);
    ctx.outputs.emplace_back(node, k);
  }
  if (!any || node->num_inputs() == 0) return absl::OkStatus();
  bool needs_input_grad = false;
  for (const Endpoint& e : node->inputs()) needs_input_grad |= from_x[e.node->id()];
  if (!needs_input_grad) return absl::OkStatus();
  if (!node->op_def().grad_fn) {
    return absl::InvalidArgumentError(absl::StrCat("op '", node->op(), "' (node '", node->name(),
                                                   "') has no gradient, but lies between a trained tensor and the loss"));
  }
  for (const Endpoint& e : node->inputs()) ctx.inputs.emplace_back(e.node, e.index);
  ctx.grad_inputs.assign(node->num_inputs(), Output());
  {
    NameScope scope(b, node->name());
    absl::Status s = node->op_def().grad_fn(&ctx);
    if (s.ok()) s = b->status();
    if (!s.ok()) return Annotate(s, absl::StrCat("gradient of node ", node->DebugName()));
  }
  for (int i = 0; i < node->num_inputs(); ++i) {
    const Endpoint& e = node->input(i);
    if (ctx.grad_inputs[i].valid() && from_x[e.node->id()]) (*pending)[e].push_back(ctx.grad_inputs[i]);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Output>> AddGradients(GraphBuilder* b, Output loss, absl::Span<const Output> xs) {
  RETURN_IF_ERROR(b->status());
  if (!loss.valid()) return absl::InvalidArgumentError("AddGradients: the loss is not a valid tensor");
  if (loss.dtype() != DType::kFloat32 || loss.shape().rank() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the loss '", loss.name(), "' must be a float32 scalar, got ",
                                                   DTypeName(loss.dtype()), loss.shape().DebugString()));
  }
  Graph* g = b->graph();
  const std::vector<bool> to_loss = NodesFeedingLoss(loss, g->num_nodes());
  std::vector<bool> from_x;
  RETURN_IF_ERROR(NodesFedByXs(*g, xs, &from_x));

  PendingGrads pending;
  pending[Endpoint{loss.node, loss.index}].push_back(b->ScalarConst(1.0f, "gradients/seed"));
  b->PushScope("gradients");
  for (int id = loss.node->id(); id >= 0; --id) {
    if (!to_loss[id] || !from_x[id]) continue;
    absl::Status s = BackpropNode(b, g->node(id), from_x, &pending);
    if (!s.ok()) {
      b->PopScope();
      return s;
    }
  }
  b->PopScope();

  std::vector<Output> result;
  for (const Output& x : xs) {
    auto it = pending.find(Endpoint{x.node, x.index});
    if (it == pending.end() || it->second.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("no gradient reaches '", x.name(), "' from the loss '", loss.name(), "': it does not affect it"));
    }
    result.push_back(SumOf(b, it->second, x.node->name()));
  }
  RETURN_IF_ERROR(b->status());
  return result;
}

}  // namespace weft
