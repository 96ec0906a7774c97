#include "graph/lowering.h"

#include <cmath>
#include <deque>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/gradients.h"
#include "graph/mixed_precision.h"
#include "graph/model_lowering.h"
#include "graph/ops/training_attrs.h"
#include "graph/training_pass.h"

namespace weft {
namespace {

// The job's optimizer with a cosine decay's length filled in from the
// job's steps, and its schedule checked.
absl::StatusOr<OptimizerSpec> ResolveOptimizer(const JobSpec& job) {
  OptimizerSpec spec = job.optimizer();
  const float wd = spec.sgd().weight_decay() + spec.momentum().weight_decay() + spec.adamw().weight_decay();
  if (spec.sgd().weight_decay() < 0 || spec.momentum().weight_decay() < 0 || spec.adamw().weight_decay() < 0 ||
      !std::isfinite(wd)) {
    return absl::InvalidArgumentError("optimizer weight_decay must be a non-negative number");
  }
  if (spec.adam().weight_decay() != 0) {
    return absl::InvalidArgumentError(
        "optimizer.adam.weight_decay is for adamw (decoupled weight decay): use `adamw { ... }`");
  }
  LearningRateSchedule* s = spec.mutable_schedule();
  if (s->warmup_steps() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.schedule.warmup_steps must not be negative, got ", s->warmup_steps()));
  }
  if (s->has_cosine() && s->cosine().decay_steps() == 0) {
    if (job.steps() <= s->warmup_steps()) {
      return absl::InvalidArgumentError(
          "optimizer.schedule.cosine.decay_steps is required when the job gives epochs (or no more steps than "
          "the warm-up): set it to the number of steps to decay over");
    }
    s->mutable_cosine()->set_decay_steps(job.steps() - s->warmup_steps());
  }
  if (s->has_cosine() && (s->cosine().decay_steps() < 0 || !(s->cosine().alpha() >= 0 && s->cosine().alpha() <= 1))) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.schedule.cosine needs decay_steps > 0 and alpha in "
                                                   "[0, 1], got ",
                                                   s->cosine().decay_steps(), " and ", s->cosine().alpha()));
  }
  if (s->has_step() && (s->step().every_steps() <= 0 || !(s->step().factor() >= 0 && s->step().factor() <= 1))) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.schedule.step needs every_steps > 0 and factor in "
                                                   "(0, 1], got ",
                                                   s->step().every_steps(), " and ", s->step().factor()));
  }
  return spec;
}

absl::StatusOr<TrainingGraph> LowerSequential(const JobSpec& job) {
  const ModelSpec& model = job.model();
  if (model.input_shape_size() == 0) return absl::InvalidArgumentError("model.input_shape is empty");
  ASSIGN_OR_RETURN(const LossTargets targets, LossTargetsOf(job));
  if (model.layer_size() == 0) return absl::InvalidArgumentError("model has no layers");
  if (targets.regression && job.eval().top_k() > 1) {
    return absl::InvalidArgumentError("eval.top_k is for classes; a MEAN_SQUARED_ERROR model has none");
  }
  if (targets.binary && job.eval().top_k() > 1) {
    return absl::InvalidArgumentError("eval.top_k of 2 classes is always 1: leave it unset for BINARY_CROSS_ENTROPY");
  }
  TrainingGraph tg;
  tg.graph = std::make_unique<Graph>();
  GraphBuilder b(tg.graph.get());
  TensorShape example(model.input_shape());
  for (int64_t d : model.input_shape()) {
    if (d <= 0) return absl::InvalidArgumentError(absl::StrCat("model.input_shape has a non-positive dimension ", d));
  }
  TensorShape batch_shape{-1};
  for (int64_t d : example.dims()) batch_shape.AddDim(d);
  Output features = b.Placeholder(DType::kFloat32, batch_shape, "features");
  // Class labels, or a regression's float targets: flat, per example in turn.
  Output labels = b.Placeholder(targets.regression ? DType::kFloat32 : DType::kInt32, {-1}, "labels");

  ASSIGN_OR_RETURN(const MixedPrecisionPlan precision, PlanMixedPrecision(job));
  UseComputeType(&b, precision);
  ModelLowering lower(job, &b);
  RETURN_IF_ERROR(lower.CheckTopology());
  const Output loss_scale = LossScaleVariable(&b, precision);
  ASSIGN_OR_RETURN(TrainingPass pass, TrainingPass::Forward(job, &b, &lower, features, labels, loss_scale));
  const Output loss = pass.loss();

  ASSIGN_OR_RETURN(Output eval_outputs, lower.Forward(features, /*training=*/false));
  ASSIGN_OR_RETURN(const LossTerms eval_terms, AddLossTerms(&b, targets, eval_outputs, labels, "eval/"));
  Output eval_loss = b.Op("Sum", {eval_terms.terms}, {}, "eval_loss");
  if (!targets.regression) {
    const Output& eval_logits = eval_terms.rows;
    Output predicted = b.Op("ArgMax", {eval_logits}, {}, "eval/predicted");
    Output hit = b.Op("Equal", {predicted, labels}, {}, "eval/hit");
    tg.correct =
        b.Op("Sum", {b.Op("Cast", {hit}, {Attr("dtype", DType::kFloat32)}, "eval/hit_float")}, {}, "correct").name();
    if (job.eval().top_k() > 1) {
      tg.correct_top_k =
          b.Op("InTopK", {eval_logits, labels}, {Attr("k", int64_t{job.eval().top_k()})}, "correct_top_k").name();
    }
  }
  RETURN_IF_ERROR(b.status());

  ASSIGN_OR_RETURN(std::vector<Output> grads, pass.Gradients(&b, lower.variables()));
  std::vector<Output> step_outputs = grads;
  step_outputs.push_back(loss);
  // Batch norm's moving statistics advance with every training step.
  ASSIGN_OR_RETURN(std::vector<Node*> moving, lower.MovingAverageUpdates());
  ASSIGN_OR_RETURN(OptimizerSpec optimizer, ResolveOptimizer(job));
  AttrList update_attrs;
  if (loss_scale.valid()) {
    ASSIGN_OR_RETURN(Unscaled unscaled, UnscaleGradients(&b, loss_scale, grads));
    grads = unscaled.grads;
    update_attrs.push_back(Attr("skip_nonfinite", true));
    ASSIGN_OR_RETURN(Node * update, AddLossScaleUpdate(&b, precision, loss_scale, unscaled.overflow));
    moving.push_back(update);  // the train op waits for it as for the moving statistics
  }
  ASSIGN_OR_RETURN(Node * train,
                   AddOptimizer(&b, optimizer, lower.variables(), grads, step_outputs, "train", update_attrs));
  for (Node* u : moving) RETURN_IF_ERROR(tg.graph->AddControlEdge(u, train));

  tg.features = features.name();
  tg.labels = labels.name();
  tg.loss = loss.name();
  tg.train_op = train->name();
  tg.eval_loss = eval_loss.name();
  for (const Output& v : lower.variables()) tg.variables.push_back(v.node->name());
  tg.example_shape = example;
  return tg;
}

// A job's variables belong to its own session (checkpoints, recovery,
// strategies' copies); containers, shared across sessions, are for
// interactive sessions.
absl::Status RefuseContainers(const Graph& graph) {
  for (const auto& n : graph.nodes()) {
    if (n == nullptr || n->op() != "Variable") continue;
    ASSIGN_OR_RETURN(std::string container, GetStringAttrOr(n->def(), "container", ""));
    if (!container.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("graph model: variable '", n->name(), "' names container '",
                                                     container.substr(0, 64),
                                                     "'; containers are for interactive sessions, not jobs"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainingGraph> LowerGraphModel(const JobSpec& job) {
  const GraphModel& gm = job.graph();
  TrainingGraph tg;
  auto graph = Graph::FromGraphDef(gm.graph());
  if (!graph.ok()) return Annotate(graph.status(), "graph model");
  tg.graph = *std::move(graph);
  RETURN_IF_ERROR(RefuseContainers(*tg.graph));
  if (job.optimizer().gradient_accumulation_steps() > 1) {
    return absl::InvalidArgumentError(
        "optimizer.gradient_accumulation_steps needs a model: a graph job writes its own train_op");
  }
  if (job.has_mixed_precision()) {
    return absl::InvalidArgumentError(
        "mixed_precision needs a model: a graph job writes its own train_op (give its MatMuls a compute_type "
        "attribute instead)");
  }
  auto check = [&](const std::string& name, const char* field, bool required) -> absl::Status {
    if (name.empty()) {
      return required ? absl::InvalidArgumentError(absl::StrCat("graph model: '", field, "' is required"))
                      : absl::OkStatus();
    }
    auto e = tg.graph->FindEndpoint(name);
    if (!e.ok()) return Annotate(e.status(), absl::StrCat("graph model: '", field, "'"));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check(gm.features(), "features", true));
  RETURN_IF_ERROR(check(gm.labels(), "labels", true));
  RETURN_IF_ERROR(check(gm.loss(), "loss", true));
  RETURN_IF_ERROR(check(gm.correct(), "correct", false));
  RETURN_IF_ERROR(check(gm.eval_loss(), "eval_loss", false));
  if (gm.train_op().empty() || tg.graph->FindNode(gm.train_op()) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("graph model: train_op '", gm.train_op(), "' names no node"));
  }
  const Endpoint f = *tg.graph->FindEndpoint(gm.features());
  const Endpoint l = *tg.graph->FindEndpoint(gm.labels());
  if (f.node->output_type(f.index) != DType::kFloat32 || l.node->output_type(l.index) != DType::kInt32) {
    return absl::InvalidArgumentError("graph model: features must be float32 and labels int32");
  }
  const TensorShape& fs = f.node->output_shape(f.index);
  if (fs.rank() < 2) return absl::InvalidArgumentError("graph model: features must be [batch, ...]");
  tg.features = gm.features();
  tg.labels = gm.labels();
  tg.loss = gm.loss();
  tg.train_op = gm.train_op();
  tg.correct = gm.correct();
  tg.eval_loss = gm.eval_loss();
  tg.example_shape = TensorShape(fs.dims().subspan(1));
  for (const auto& n : tg.graph->nodes()) {
    if (n->op() == "Variable") tg.variables.push_back(n->name());
  }
  return tg;
}

// The optimizer's learning rate, its default for 0.
float BaseRate(const OptimizerSpec& spec) {
  switch (spec.kind_case()) {
    case OptimizerSpec::kMomentum: return spec.momentum().learning_rate() > 0 ? spec.momentum().learning_rate() : 0.01f;
    case OptimizerSpec::kAdam: return spec.adam().learning_rate() > 0 ? spec.adam().learning_rate() : 0.001f;
    case OptimizerSpec::kAdamw: return spec.adamw().learning_rate() > 0 ? spec.adamw().learning_rate() : 0.001f;
    case OptimizerSpec::kSgd:
    case OptimizerSpec::KIND_NOT_SET: break;
  }
  return spec.sgd().learning_rate() > 0 ? spec.sgd().learning_rate() : 0.01f;
}

// The optimizer attributes of the schedule (graph/ops/training_attrs.h)
// and the weight decay.
AttrList RateAttrs(const LearningRateSchedule& schedule, float learning_rate, float weight_decay) {
  AttrList attrs = {Attr("learning_rate", learning_rate)};
  if (weight_decay != 0.0f) attrs.push_back(Attr("weight_decay", weight_decay));
  if (schedule.warmup_steps() != 0) attrs.push_back(Attr("warmup_steps", schedule.warmup_steps()));
  if (schedule.has_cosine()) {
    attrs.push_back(Attr("decay", "cosine"));
    attrs.push_back(Attr("decay_steps", schedule.cosine().decay_steps()));
    attrs.push_back(Attr("decay_alpha", schedule.cosine().alpha()));
  } else if (schedule.has_step()) {
    attrs.push_back(Attr("decay", "step"));
    attrs.push_back(Attr("decay_steps", schedule.step().every_steps()));
    attrs.push_back(Attr("decay_factor", schedule.step().factor() > 0 ? schedule.step().factor() : 0.1f));
  }
  return attrs;
}

// The gradients the updates apply: `grads` scaled to a global norm of at
// most clip_norm (one GlobalNormScale over all of them), or `grads` as they
// are when clip_norm is 0.
absl::StatusOr<std::vector<Output>> ClipGradients(GraphBuilder* b, float clip_norm, const std::vector<Output>& grads) {
  if (clip_norm == 0.0f || grads.empty()) return grads;
  if (!(clip_norm > 0.0f) || !std::isfinite(clip_norm)) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.clip_global_norm must be a positive number or 0, got ", clip_norm));
  }
  Node* scale = b->AddNode("GlobalNormScale", grads, {Attr("clip_norm", clip_norm)}, "clip");
  RETURN_IF_ERROR(b->status());
  std::vector<Output> clipped;
  clipped.reserve(grads.size());
  for (const Output& g : grads) clipped.push_back(b->Op("Mul", {g, Output(scale, 0)}, {}, "clipped"));
  RETURN_IF_ERROR(b->status());
  return clipped;
}

// Nodes the training step runs anyway (what `step_outputs` depend on):
// updates may wait on these, not on readers that only evaluation runs.
std::vector<bool> StepNodes(Graph* g, const std::vector<Output>& step_outputs) {
  std::vector<bool> in_step(g->num_nodes(), false);
  std::deque<Node*> queue;
  for (const Output& o : step_outputs) {
    if (!in_step[o.node->id()]) {
      in_step[o.node->id()] = true;
      queue.push_back(o.node);
    }
  }
  while (!queue.empty()) {
    Node* n = queue.front();
    queue.pop_front();
    for (const Endpoint& e : n->inputs()) {
      if (!in_step[e.node->id()]) {
        in_step[e.node->id()] = true;
        queue.push_back(e.node);
      }
    }
    for (Node* c : n->control_inputs()) {
      if (!in_step[c->id()]) {
        in_step[c->id()] = true;
        queue.push_back(c);
      }
    }
  }
  return in_step;
}

// The update of `var` by `grad`, after `readers`. SGD and momentum count
// their updates only for a schedule (`counted`); Adam always does.
absl::StatusOr<Node*> AddUpdate(GraphBuilder* b, const OptimizerSpec& spec, const Output& var, const Output& grad,
                                bool counted, const std::vector<Node*>& readers, const AttrList& extra) {
  const std::string vname = var.node->name();
  auto count = [&](const char* slot) {
    return b->Variable(absl::StrCat(vname, "/", slot), DType::kFloat32, TensorShape{}, "zeros");
  };
  Node* update = nullptr;
  switch (spec.kind_case()) {
    case OptimizerSpec::kMomentum: {
      const auto& m = spec.momentum();
      std::vector<Output> in = {var, b->Variable(vname + "/momentum", DType::kFloat32, var.shape(), "zeros")};
      if (counted) in.push_back(count("step"));
      in.push_back(grad);
      AttrList attrs = RateAttrs(spec.schedule(), BaseRate(spec), m.weight_decay());
      attrs.insert(attrs.end(), extra.begin(), extra.end());
      attrs.push_back(Attr("momentum", m.momentum()));
      attrs.push_back(Attr("use_nesterov", m.nesterov()));
      update = b->AddNode("ApplyMomentum", in, attrs, "apply", readers);
      break;
    }
    case OptimizerSpec::kAdam:
    case OptimizerSpec::kAdamw: {
      const bool w = spec.has_adamw();
      const auto& a = w ? spec.adamw() : spec.adam();
      Output m = b->Variable(vname + "/adam_m", DType::kFloat32, var.shape(), "zeros");
      Output v = b->Variable(vname + "/adam_v", DType::kFloat32, var.shape(), "zeros");
      AttrList attrs =
          RateAttrs(spec.schedule(), BaseRate(spec), w ? (a.weight_decay() > 0 ? a.weight_decay() : 0.01f) : 0.0f);
      attrs.push_back(Attr("beta1", a.beta1() > 0 ? a.beta1() : 0.9f));
      attrs.push_back(Attr("beta2", a.beta2() > 0 ? a.beta2() : 0.999f));
      attrs.push_back(Attr("epsilon", a.epsilon() > 0 ? a.epsilon() : 1e-7f));
      attrs.insert(attrs.end(), extra.begin(), extra.end());
      update = b->AddNode("ApplyAdam", {var, m, v, count("adam_t"), grad}, attrs, "apply", readers);
      break;
    }
    case OptimizerSpec::kSgd:
    case OptimizerSpec::KIND_NOT_SET: {
      std::vector<Output> in = {var};
      if (counted) in.push_back(count("step"));
      in.push_back(grad);
      AttrList attrs = RateAttrs(spec.schedule(), BaseRate(spec), spec.sgd().weight_decay());
      attrs.insert(attrs.end(), extra.begin(), extra.end());
      update = b->AddNode("ApplyGradientDescent", in, attrs, "apply", readers);
      break;
    }
  }
  RETURN_IF_ERROR(b->status());
  return update;
}

}  // namespace

absl::StatusOr<Node*> AddOptimizer(GraphBuilder* b, const OptimizerSpec& spec, const std::vector<Output>& vars,
                                   const std::vector<Output>& grads, const std::vector<Output>& step_outputs,
                                   const std::string& train_op_name, const AttrList& update_attrs) {
  std::vector<bool> in_step = StepNodes(b->graph(), step_outputs);
  NameScope ns(b, "optimizer");
  ASSIGN_OR_RETURN(std::vector<Output> applied, ClipGradients(b, spec.clip_global_norm(), grads));
  const bool counted = spec.schedule().warmup_steps() > 0 || spec.schedule().decay_case() !=
                                                                  LearningRateSchedule::DECAY_NOT_SET;
  std::vector<Node*> updates;
  for (size_t i = 0; i < vars.size(); ++i) {
    const Output& var = vars[i];
    std::vector<Node*> readers;
    for (const Node::OutEdge& e : var.node->out_edges()) {
      if (e.dst->id() < static_cast<int>(in_step.size()) && in_step[e.dst->id()]) readers.push_back(e.dst);
    }
    ASSIGN_OR_RETURN(Node * update, AddUpdate(b, spec, var, applied[i], counted, readers, update_attrs));
    updates.push_back(update);
  }
  b->PopScope();  // the train op sits at the top level
  Node* train = b->AddNode("NoOp", {}, {}, train_op_name, updates);
  b->PushScope("optimizer");
  RETURN_IF_ERROR(b->status());
  return train;
}

absl::StatusOr<LrSchedule> LearningRateOf(const JobSpec& job) {
  ASSIGN_OR_RETURN(OptimizerSpec spec, ResolveOptimizer(job));
  NodeDef attrs;
  for (auto& [name, value] : RateAttrs(spec.schedule(), BaseRate(spec), 0.0f)) (*attrs.mutable_attr())[name] = value;
  return ParseLrSchedule(attrs);
}

absl::StatusOr<TrainingGraph> LowerJob(const JobSpec& job) {
  switch (job.model_source_case()) {
    case JobSpec::kModel: return LowerSequential(job);
    case JobSpec::kGraph: return LowerGraphModel(job);
    default: return absl::InvalidArgumentError("the job has neither a model nor a graph");
  }
}

}  // namespace weft
