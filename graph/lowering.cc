#include "graph/lowering.h"

#include <deque>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/gradients.h"
#include "graph/model_lowering.h"

namespace weft {
namespace {

absl::StatusOr<TrainingGraph> LowerSequential(const JobSpec& job) {
  const ModelSpec& model = job.model();
  if (model.input_shape_size() == 0) return absl::InvalidArgumentError("model.input_shape is empty");
  if (model.num_classes() < 2) return absl::InvalidArgumentError("model.num_classes must be at least 2");
  if (model.layer_size() == 0) return absl::InvalidArgumentError("model has no layers");
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
  Output labels = b.Placeholder(DType::kInt32, {-1}, "labels");

  ModelLowering lower(job, &b);
  RETURN_IF_ERROR(lower.CheckTopology());
  ASSIGN_OR_RETURN(Output logits, lower.Forward(features, /*training=*/true));
  if (logits.shape().rank() != 2 || logits.shape().dim(1) != model.num_classes()) {
    return absl::InvalidArgumentError(absl::StrCat("the last layer must produce [batch, num_classes=",
                                                   model.num_classes(), "] logits, got ",
                                                   logits.shape().DebugString()));
  }
  Output per_example = b.Op("SparseSoftmaxCrossEntropyWithLogits", {logits, labels}, {}, "xent");
  Output loss = b.Op("Mean", {per_example}, {}, "loss");
  RETURN_IF_ERROR(b.status());

  ASSIGN_OR_RETURN(Output eval_logits, lower.Forward(features, /*training=*/false));
  Output eval_xent = b.Op("SparseSoftmaxCrossEntropyWithLogits", {eval_logits, labels}, {}, "eval/xent");
  Output eval_loss = b.Op("Sum", {eval_xent}, {}, "eval_loss");
  Output predicted = b.Op("ArgMax", {eval_logits}, {}, "eval/predicted");
  Output hit = b.Op("Equal", {predicted, labels}, {}, "eval/hit");
  Output correct = b.Op("Sum", {b.Op("Cast", {hit}, {Attr("dtype", DType::kFloat32)}, "eval/hit_float")}, {},
                        "correct");
  RETURN_IF_ERROR(b.status());

  ASSIGN_OR_RETURN(std::vector<Output> grads, AddGradients(&b, loss, lower.variables()));
  std::vector<Output> step_outputs = grads;
  step_outputs.push_back(loss);
  ASSIGN_OR_RETURN(Node * train, AddOptimizer(&b, job.optimizer(), lower.variables(), grads, step_outputs, "train"));
  // Batch norm's moving statistics advance with every training step.
  for (Node* u : lower.state_updates()) RETURN_IF_ERROR(tg.graph->AddControlEdge(u, train));

  tg.features = features.name();
  tg.labels = labels.name();
  tg.loss = loss.name();
  tg.train_op = train->name();
  tg.correct = correct.name();
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

}  // namespace

absl::StatusOr<Node*> AddOptimizer(GraphBuilder* b, const OptimizerSpec& spec, const std::vector<Output>& vars,
                                   const std::vector<Output>& grads, const std::vector<Output>& step_outputs,
                                   const std::string& train_op_name) {
  // Nodes the training step runs anyway: updates may wait on these, not on
  // readers that only evaluation runs.
  Graph* g = b->graph();
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
  std::vector<Node*> updates;
  NameScope ns(b, "optimizer");
  for (size_t i = 0; i < vars.size(); ++i) {
    const Output& var = vars[i];
    std::vector<Node*> readers;
    for (const Node::OutEdge& e : var.node->out_edges()) {
      if (e.dst->id() < static_cast<int>(in_step.size()) && in_step[e.dst->id()]) readers.push_back(e.dst);
    }
    const std::string vname = var.node->name();
    Node* update = nullptr;
    switch (spec.kind_case()) {
      case OptimizerSpec::kMomentum: {
        const auto& m = spec.momentum();
        Output accum = b->Variable(vname + "/momentum", DType::kFloat32, var.shape(), "zeros");
        update = b->AddNode("ApplyMomentum", {var, accum, grads[i]},
                            {Attr("learning_rate", m.learning_rate() > 0 ? m.learning_rate() : 0.01f),
                             Attr("momentum", m.momentum()), Attr("use_nesterov", m.nesterov())},
                            "apply", readers);
        break;
      }
      case OptimizerSpec::kAdam: {
        const auto& a = spec.adam();
        Output m = b->Variable(vname + "/adam_m", DType::kFloat32, var.shape(), "zeros");
        Output v = b->Variable(vname + "/adam_v", DType::kFloat32, var.shape(), "zeros");
        Output t = b->Variable(vname + "/adam_t", DType::kFloat32, TensorShape{}, "zeros");
        update = b->AddNode("ApplyAdam", {var, m, v, t, grads[i]},
                            {Attr("learning_rate", a.learning_rate() > 0 ? a.learning_rate() : 0.001f),
                             Attr("beta1", a.beta1() > 0 ? a.beta1() : 0.9f),
                             Attr("beta2", a.beta2() > 0 ? a.beta2() : 0.999f),
                             Attr("epsilon", a.epsilon() > 0 ? a.epsilon() : 1e-7f)},
                            "apply", readers);
        break;
      }
      case OptimizerSpec::kSgd:
      case OptimizerSpec::KIND_NOT_SET: {
        const float lr = spec.has_sgd() && spec.sgd().learning_rate() > 0 ? spec.sgd().learning_rate() : 0.01f;
        update = b->AddNode("ApplyGradientDescent", {var, grads[i]}, {Attr("learning_rate", lr)}, "apply", readers);
        break;
      }
    }
    RETURN_IF_ERROR(b->status());
    updates.push_back(update);
  }
  b->PopScope();  // the train op sits at the top level
  Node* train = b->AddNode("NoOp", {}, {}, train_op_name, updates);
  b->PushScope("optimizer");
  RETURN_IF_ERROR(b->status());
  return train;
}

absl::StatusOr<TrainingGraph> LowerJob(const JobSpec& job) {
  switch (job.model_source_case()) {
    case JobSpec::kModel: return LowerSequential(job);
    case JobSpec::kGraph: return LowerGraphModel(job);
    default: return absl::InvalidArgumentError("the job has neither a model nor a graph");
  }
}

}  // namespace weft
