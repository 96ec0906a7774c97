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

}  // namespace

absl::StatusOr<std::vector<Output>> AddGradients(GraphBuilder* b, Output loss, absl::Span<const Output> xs) {
  RETURN_IF_ERROR(b->status());
  if (!loss.valid()) return absl::InvalidArgumentError("AddGradients: the loss is not a valid tensor");
  if (loss.dtype() != DType::kFloat32 || loss.shape().rank() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the loss '", loss.name(), "' must be a float32 scalar, got ",
                                                   DTypeName(loss.dtype()), loss.shape().DebugString()));
  }
  Graph* g = b->graph();
  const int n = g->num_nodes();

  // Nodes the loss depends on through data edges.
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
  // Nodes that depend on some x; ids are topological, so one forward sweep.
  std::vector<bool> from_x(n, false);
  for (const Output& x : xs) {
    if (!x.valid()) return absl::InvalidArgumentError("AddGradients: an input tensor is not valid");
    from_x[x.node->id()] = true;
  }
  for (int id = 0; id < n; ++id) {
    if (from_x[id]) continue;
    for (const Endpoint& e : g->node(id)->inputs()) {
      if (from_x[e.node->id()]) {
        from_x[id] = true;
        break;
      }
    }
  }

  absl::flat_hash_map<Endpoint, std::vector<Output>, EndpointHash> pending;
  pending[Endpoint{loss.node, loss.index}].push_back(b->ScalarConst(1.0f, "gradients/seed"));

  auto sum_of = [&](const std::vector<Output>& parts, const std::string& what) -> Output {
    if (parts.empty()) return Output();
    if (parts.size() == 1) return parts[0];
    return b->Op("AddN", parts, {}, absl::StrCat("gradients/", what, "/AddN"));
  };

  b->PushScope("gradients");
  for (int id = loss.node->id(); id >= 0; --id) {
    Node* node = g->node(id);
    if (!to_loss[id] || !from_x[id]) continue;
    GradContext ctx{b, node, {}, {}, {}, {}};
    bool any = false;
    for (int k = 0; k < node->num_outputs(); ++k) {
      auto it = pending.find(Endpoint{node, k});
      Output grad = it == pending.end() ? Output() : sum_of(it->second, node->name());
      any |= grad.valid();
      ctx.grad_outputs.push_back(grad);
      ctx.outputs.emplace_back(node, k);
    }
    if (!any || node->num_inputs() == 0) continue;
    bool needs_input_grad = false;
    for (const Endpoint& e : node->inputs()) needs_input_grad |= from_x[e.node->id()];
    if (!needs_input_grad) continue;
    if (!node->op_def().grad_fn) {
      b->PopScope();
      return absl::InvalidArgumentError(absl::StrCat("op '", node->op(), "' (node '", node->name(),
                                                     "') has no gradient, but lies between a trained tensor and the loss"));
    }
    for (const Endpoint& e : node->inputs()) ctx.inputs.emplace_back(e.node, e.index);
    ctx.grad_inputs.assign(node->num_inputs(), Output());
    {
      NameScope scope(b, node->name());
      absl::Status s = node->op_def().grad_fn(&ctx);
      if (s.ok()) s = b->status();
      if (!s.ok()) {
        b->PopScope();
        return Annotate(s, absl::StrCat("gradient of node ", node->DebugName()));
      }
    }
    for (int i = 0; i < node->num_inputs(); ++i) {
      const Endpoint& e = node->input(i);
      if (ctx.grad_inputs[i].valid() && from_x[e.node->id()]) pending[e].push_back(ctx.grad_inputs[i]);
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
    result.push_back(sum_of(it->second, x.node->name()));
  }
  RETURN_IF_ERROR(b->status());
  return result;
}

}  // namespace weft
