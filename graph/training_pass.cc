#include "graph/training_pass.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/gradients.h"

namespace weft {
namespace {

// One pass's mean loss over `features` and `labels`.
absl::StatusOr<Output> PassLoss(GraphBuilder* b, ModelLowering* lower, int64_t num_classes, Output features,
                                Output labels, const std::string& scope) {
  ASSIGN_OR_RETURN(Output logits, lower->Forward(features, /*training=*/true));
  if (!scope.empty()) b->PushScope(scope);
  absl::StatusOr<Output> rows = Predictions(b, logits, num_classes, "logits");
  if (rows.ok()) {
    Output per_example = b->Op("SparseSoftmaxCrossEntropyWithLogits", {*rows, labels}, {}, "xent");
    rows = b->Op("Mean", {per_example}, {}, "loss");
  }
  if (!scope.empty()) b->PopScope();
  RETURN_IF_ERROR(rows.status());
  RETURN_IF_ERROR(b->status());
  return rows;
}

}  // namespace

Output MeanOf(GraphBuilder* b, const std::vector<Output>& terms, const std::string& name) {
  if (terms.size() == 1) return terms[0];
  return b->Op("Mul",
               {b->Op("AddN", terms, {}, name + "_sum"),
                b->ScalarConst(1.0f / static_cast<float>(terms.size()), name + "_scale")},
               {}, name);
}

absl::StatusOr<Output> Predictions(GraphBuilder* b, Output logits, int64_t num_classes, const char* name) {
  const TensorShape& s = logits.shape();
  if (s.rank() < 2 || s.dim(s.rank() - 1) != num_classes) {
    return absl::InvalidArgumentError(absl::StrCat("the last layer must produce [batch, num_classes=", num_classes,
                                                   "] logits (or [batch, positions..., num_classes] for a "
                                                   "sequence), got ",
                                                   s.DebugString()));
  }
  if (s.rank() == 2) return logits;
  Output rows = b->Op("Reshape", {logits}, {Attr("shape", std::vector<int64_t>{-1, num_classes})}, name);
  RETURN_IF_ERROR(b->status());
  return rows;
}

absl::StatusOr<TrainingPass> TrainingPass::Forward(const JobSpec& job, GraphBuilder* b, ModelLowering* lower,
                                                   Output features, Output labels) {
  const int64_t k = job.optimizer().gradient_accumulation_steps();
  const int64_t num_classes = job.model().num_classes();
  TrainingPass pass;
  if (k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.gradient_accumulation_steps must be 0 or more, got ", k));
  }
  if (k <= 1) {
    ASSIGN_OR_RETURN(pass.loss_, PassLoss(b, lower, num_classes, features, labels, ""));
    pass.losses_ = {pass.loss_};
    return pass;
  }
  if (job.batch_size() % k != 0) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.gradient_accumulation_steps ", k,
                                                   " must divide batch_size ", job.batch_size(),
                                                   " into equal micro-batches"));
  }
  std::vector<Node*> previous;  // the previous pass's gradient nodes
  for (int64_t i = 0; i < k; ++i) {
    const std::string scope = absl::StrCat("micro_", i);
    // The first pass makes the variables, which keep their unscoped names.
    if (i > 0) b->PushScope(scope);
    const AttrList attrs = {Attr("index", i), Attr("count", k)};
    // Pass i starts once every gradient of pass i - 1 is computed.
    Node* f = b->AddNode("MicroBatch", {features}, attrs, "features", previous);
    Node* l = b->AddNode("MicroBatch", {labels}, attrs, "labels", previous);
    absl::StatusOr<Output> loss = (f == nullptr || l == nullptr)
                                      ? absl::StatusOr<Output>(b->status())
                                      : PassLoss(b, lower, num_classes, Output(f, 0), Output(l, 0),
                                                 i == 0 ? scope : "");
    if (i > 0) b->PopScope();
    RETURN_IF_ERROR(loss.status());
    pass.losses_.push_back(*loss);
    ASSIGN_OR_RETURN(std::vector<Output> grads, AddGradients(b, *loss, lower->variables()));
    previous.clear();
    for (const Output& g : grads) previous.push_back(g.node);
    pass.grads_.push_back(std::move(grads));
  }
  pass.loss_ = MeanOf(b, pass.losses_, "loss");
  RETURN_IF_ERROR(b->status());
  return pass;
}

absl::StatusOr<std::vector<Output>> TrainingPass::Gradients(GraphBuilder* b, const std::vector<Output>& vars) {
  if (grads_.empty()) return AddGradients(b, loss_, vars);
  std::vector<Output> mean;
  NameScope ns(b, "accumulated");
  for (size_t j = 0; j < vars.size(); ++j) {
    std::vector<Output> terms;
    for (const std::vector<Output>& grads : grads_) terms.push_back(grads[j]);
    mean.push_back(MeanOf(b, terms, vars[j].node->name()));
  }
  RETURN_IF_ERROR(b->status());
  return mean;
}

}  // namespace weft
