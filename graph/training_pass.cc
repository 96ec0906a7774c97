#include "graph/training_pass.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/gradients.h"

namespace weft {
namespace {

// One pass's mean loss over `features` and `labels`.
absl::StatusOr<Output> PassLoss(GraphBuilder* b, ModelLowering* lower, const LossTargets& targets, Output features,
                                Output labels, const std::string& scope) {
  ASSIGN_OR_RETURN(Output outputs, lower->Forward(features, /*training=*/true));
  if (!scope.empty()) b->PushScope(scope);
  absl::StatusOr<LossTerms> terms = AddLossTerms(b, targets, outputs, labels, "");
  Output loss;
  if (terms.ok()) loss = b->Op("Mean", {terms->terms}, {}, "loss");
  if (!scope.empty()) b->PopScope();
  RETURN_IF_ERROR(terms.status());
  RETURN_IF_ERROR(b->status());
  return loss;
}

}  // namespace

absl::StatusOr<LossTargets> LossTargetsOf(const JobSpec& job) {
  const ModelSpec& model = job.model();
  switch (model.loss()) {
    case LOSS_DEFAULT:
    case SPARSE_SOFTMAX_CROSS_ENTROPY:
      if (model.num_classes() < 2) return absl::InvalidArgumentError("model.num_classes must be at least 2");
      return LossTargets{false, false, model.num_classes()};
    case BINARY_CROSS_ENTROPY:
      if (model.num_classes() != 2) {
        return absl::InvalidArgumentError(absl::StrCat("model.num_classes is ", model.num_classes(),
                                                       ", but BINARY_CROSS_ENTROPY is for classes 0 and 1: set 2"));
      }
      return LossTargets{false, true, 2};
    case MEAN_SQUARED_ERROR: {
      if (job.dataset().format() != DatasetSpec::SERIES) {
        return absl::InvalidArgumentError(absl::StrCat(
            "model.loss MEAN_SQUARED_ERROR needs float targets, which only a SERIES dataset has (this one is ",
            DatasetSpec::Format_Name(job.dataset().format()), ")"));
      }
      if (model.num_classes() != 0) {
        return absl::InvalidArgumentError(absl::StrCat("model.num_classes is ", model.num_classes(),
                                                       ", but a MEAN_SQUARED_ERROR model has targets, not classes: "
                                                       "leave it unset"));
      }
      const int64_t horizon = job.dataset().series().horizon();
      return LossTargets{true, false, horizon == 0 ? 1 : horizon};
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("model.loss ", static_cast<int>(model.loss()), " is unknown"));
  }
}

absl::StatusOr<LossTerms> AddLossTerms(GraphBuilder* b, const LossTargets& targets, Output outputs, Output labels,
                                       const std::string& prefix) {
  LossTerms t;
  if (targets.binary) {
    // One logit z per example; [0, z] as two classes' logits makes the
    // softmax of class 1 sigmoid(z), so the sparse cross-entropy is the
    // sigmoid's and class 1 wins exactly when z > 0.
    const TensorShape& s = outputs.shape();
    if (s.rank() < 2 || s.dim(s.rank() - 1) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("the last layer must produce [batch, 1] logits for "
                                                     "BINARY_CROSS_ENTROPY (one per example), got ",
                                                     s.DebugString()));
    }
    ASSIGN_OR_RETURN(Output z, Predictions(b, outputs, 1, (prefix + "logit").c_str()));
    Output zero = b->Op("Sub", {z, z}, {}, prefix + "zero");
    t.rows = b->Op("Concat", {zero, z}, {}, prefix + "logits");
    t.terms = b->Op("SparseSoftmaxCrossEntropyWithLogits", {t.rows, labels}, {}, prefix + "xent");
    RETURN_IF_ERROR(b->status());
    return t;
  }
  if (!targets.regression) {
    const std::string logits = prefix + "logits";
    ASSIGN_OR_RETURN(t.rows, Predictions(b, outputs, targets.width, logits.c_str()));
    t.terms = b->Op("SparseSoftmaxCrossEntropyWithLogits", {t.rows, labels}, {}, prefix + "xent");
    RETURN_IF_ERROR(b->status());
    return t;
  }
  const TensorShape& s = outputs.shape();
  if (s.rank() != 2 || s.dim(1) != targets.width) {
    return absl::InvalidArgumentError(absl::StrCat("the last layer must produce [batch, targets=", targets.width,
                                                   "] outputs for MEAN_SQUARED_ERROR (the series' horizon), got ",
                                                   s.DebugString()));
  }
  Output flat = b->Op("Reshape", {outputs}, {Attr("shape", std::vector<int64_t>{-1})}, prefix + "outputs");
  Output diff = b->Op("Sub", {flat, labels}, {}, prefix + "diff");
  t.terms = b->Op("Mul", {diff, diff}, {}, prefix + "squares");
  RETURN_IF_ERROR(b->status());
  return t;
}

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

namespace {

// What autodiff differentiates: the loss, times the loss scale when there is one.
Output Differentiated(GraphBuilder* b, Output loss, Output loss_scale) {
  if (!loss_scale.valid()) return loss;
  return b->Op("Mul", {loss, loss_scale}, {}, "scaled_loss");
}

}  // namespace

absl::StatusOr<TrainingPass> TrainingPass::Forward(const JobSpec& job, GraphBuilder* b, ModelLowering* lower,
                                                   Output features, Output labels, Output loss_scale) {
  const int64_t k = job.optimizer().gradient_accumulation_steps();
  ASSIGN_OR_RETURN(const LossTargets targets, LossTargetsOf(job));
  TrainingPass pass;
  pass.loss_scale_ = loss_scale;
  if (k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.gradient_accumulation_steps must be 0 or more, got ", k));
  }
  if (k <= 1) {
    ASSIGN_OR_RETURN(pass.loss_, PassLoss(b, lower, targets, features, labels, ""));
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
                                      : PassLoss(b, lower, targets, Output(f, 0), Output(l, 0),
                                                 i == 0 ? scope : "");
    if (i > 0) b->PopScope();
    RETURN_IF_ERROR(loss.status());
    pass.losses_.push_back(*loss);
    ASSIGN_OR_RETURN(std::vector<Output> grads,
                     AddGradients(b, Differentiated(b, *loss, loss_scale), lower->variables()));
    previous.clear();
    for (const Output& g : grads) previous.push_back(g.node);
    pass.grads_.push_back(std::move(grads));
  }
  pass.loss_ = MeanOf(b, pass.losses_, "loss");
  RETURN_IF_ERROR(b->status());
  return pass;
}

absl::StatusOr<std::vector<Output>> TrainingPass::Gradients(GraphBuilder* b, const std::vector<Output>& vars) {
  if (grads_.empty()) return AddGradients(b, Differentiated(b, loss_, loss_scale_), vars);
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
