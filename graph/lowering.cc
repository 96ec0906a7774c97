#include "graph/lowering.h"

#include <deque>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/gradients.h"

namespace weft {
namespace {

absl::Status LayerError(int i, const LayerSpec& layer, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat("model layer ", i, layer.name().empty() ? "" : " '", layer.name(),
                                                 layer.name().empty() ? "" : "'", ": ", msg));
}

Output Activate(GraphBuilder* b, Output x, Activation a) {
  switch (a) {
    case RELU: return b->Op("Relu", {x});
    case SIGMOID: return b->Op("Sigmoid", {x});
    case TANH: return b->Op("Tanh", {x});
    case SOFTMAX: return b->Op("Softmax", {x});
    default: return x;
  }
}

// Variables of one layer, created by the first (training) pass and reused by
// the evaluation pass.
struct LayerVars {
  Output kernel;
  Output bias;
};

class SequentialLowering {
 public:
  SequentialLowering(const JobSpec& job, GraphBuilder* b) : job_(job), model_(job.model()), b_(b) {}

  // Builds one forward pass; returns logits (before a final softmax).
  absl::StatusOr<Output> Forward(Output x, bool training) {
    vars_.resize(model_.layer_size());
    const int last = model_.layer_size() - 1;
    for (int i = 0; i <= last; ++i) {
      const LayerSpec& layer = model_.layer(i);
      const std::string scope =
          layer.name().empty() ? absl::StrCat("layer", i, "_", KindName(layer)) : layer.name();
      NameScope ns(b_, training ? scope : absl::StrCat("eval/", scope));
      RETURN_IF_ERROR(LowerLayer(i, i == last, training, &x));
      if (!b_->status().ok()) return Annotate(b_->status(), absl::StrCat("model layer ", i));
    }
    return x;
  }

  const std::vector<Output>& variables() const { return variables_; }

 private:
  // Adds layer `i` on top of `*x` and leaves its output there; `last`:
  // it is the model's last layer, whose softmax the loss applies.
  absl::Status LowerLayer(int i, bool last, bool training, Output* x) {
    const LayerSpec& layer = model_.layer(i);
    const TensorShape& in = x->shape();
    switch (layer.kind_case()) {
      case LayerSpec::kDense: return Dense(i, last, x);
      case LayerSpec::kConv2D: return Conv2D(i, last, x);
      case LayerSpec::kMaxPool: return MaxPool(i, x);
      case LayerSpec::kFlatten: {
        int64_t n = 1;
        for (int d = 1; d < in.rank(); ++d) n *= in.dim(d);
        if (n <= 0) return LayerError(i, layer, absl::StrCat("cannot flatten input ", in.DebugString()));
        *x = b_->Op("Reshape", {*x}, {Attr("shape", std::vector<int64_t>{-1, n})});
        break;
      }
      case LayerSpec::kReshape: {
        // One example keeps its element count: a shape that does not would
        // silently regroup the batch (784 values as 112 rows of 7).
        std::vector<int64_t> shape{-1};
        int64_t in_elems = 1, out_elems = 1;
        for (int d = 1; d < in.rank(); ++d) in_elems *= in.dim(d);
        for (int64_t d : layer.reshape().shape()) {
          if (d <= 0 || __builtin_mul_overflow(out_elems, d, &out_elems)) {
            return LayerError(i, layer, absl::StrCat("reshape.shape needs positive dimensions that fit, got ", d));
          }
          shape.push_back(d);
        }
        if (out_elems != in_elems) {
          return LayerError(i, layer, absl::StrCat("reshape.shape holds ", out_elems, " values per example; its input ",
                                                   in.DebugString(), " has ", in_elems));
        }
        *x = b_->Op("Reshape", {*x}, {Attr("shape", shape)});
        break;
      }
      case LayerSpec::kDropout: {
        const float rate = layer.dropout().rate();
        if (!(rate >= 0.0f && rate < 1.0f)) {
          return LayerError(i, layer, absl::StrCat("dropout.rate must be in [0, 1), got ", rate));
        }
        if (training && rate > 0.0f) {
          *x = b_->Op("Dropout", {*x}, {Attr("rate", rate), Attr("seed", static_cast<int64_t>(job_.seed() + i))});
        }
        break;
      }
      case LayerSpec::kActivation:
        if (!(last && layer.activation().activation() == SOFTMAX)) {
          *x = Activate(b_, *x, layer.activation().activation());
        }
        break;
      case LayerSpec::KIND_NOT_SET:
        return LayerError(i, layer, "layer has no kind (dense, conv2d, max_pool, ...)");
    }
    return absl::OkStatus();
  }

  absl::Status Dense(int i, bool last, Output* x) {
    const LayerSpec& layer = model_.layer(i);
    const DenseLayer& d = layer.dense();
    const TensorShape& in = x->shape();
    LayerVars& v = vars_[i];
    if (d.units() <= 0) return LayerError(i, layer, "dense.units must be positive");
    if (in.rank() != 2) {
      return LayerError(i, layer, absl::StrCat("dense needs a flat [batch, features] input, got ",
                                               in.DebugString(), "; add a flatten layer before it"));
    }
    if (!v.kernel.valid()) {
      v.kernel =
          b_->Variable("kernel", DType::kFloat32, {in.dim(1), d.units()}, "glorot_uniform", job_.seed() + i);
      if (!d.no_bias()) v.bias = b_->Variable("bias", DType::kFloat32, {d.units()}, "zeros");
      Track(v);
    }
    *x = b_->Op("MatMul", {*x, v.kernel});
    if (v.bias.valid()) *x = b_->Op("BiasAdd", {*x, v.bias});
    if (!(last && d.activation() == SOFTMAX)) *x = Activate(b_, *x, d.activation());
    return absl::OkStatus();
  }

  absl::Status Conv2D(int i, bool last, Output* x) {
    const LayerSpec& layer = model_.layer(i);
    const Conv2DLayer& c = layer.conv2d();
    const TensorShape& in = x->shape();
    LayerVars& v = vars_[i];
    if (c.filters() <= 0 || c.kernel_size() <= 0) {
      return LayerError(i, layer, "conv2d.filters and conv2d.kernel_size must be positive");
    }
    if (in.rank() != 4) {
      return LayerError(i, layer, absl::StrCat("conv2d needs an image input [batch, height, width, channels], got ",
                                               in.DebugString(), "; set input_shape or add a reshape layer"));
    }
    if (!v.kernel.valid()) {
      v.kernel = b_->Variable("kernel", DType::kFloat32, {c.kernel_size(), c.kernel_size(), in.dim(3), c.filters()},
                              "glorot_uniform", job_.seed() + i);
      v.bias = b_->Variable("bias", DType::kFloat32, {c.filters()}, "zeros");
      Track(v);
    }
    const std::string padding = c.padding().empty() ? "SAME" : c.padding();
    if (padding != "SAME" && padding != "VALID") {
      return LayerError(i, layer, absl::StrCat("conv2d.padding must be SAME or VALID, got '", padding, "'"));
    }
    *x = b_->Op("Conv2D", {*x, v.kernel},
                {Attr("stride", c.stride() > 0 ? c.stride() : int64_t{1}), Attr("padding", padding)});
    *x = b_->Op("BiasAdd", {*x, v.bias});
    if (!(last && c.activation() == SOFTMAX)) *x = Activate(b_, *x, c.activation());
    return absl::OkStatus();
  }

  absl::Status MaxPool(int i, Output* x) {
    const LayerSpec& layer = model_.layer(i);
    const MaxPoolLayer& p = layer.max_pool();
    const TensorShape& in = x->shape();
    const int64_t k = p.pool_size() > 0 ? p.pool_size() : 2;
    const std::string padding = p.padding().empty() ? "VALID" : p.padding();
    if (padding != "SAME" && padding != "VALID") {
      return LayerError(i, layer, absl::StrCat("max_pool.padding must be SAME or VALID, got '", padding, "'"));
    }
    if (in.rank() != 4) {
      return LayerError(i, layer, absl::StrCat("max_pool needs an image input, got ", in.DebugString()));
    }
    *x = b_->Op("MaxPool", {*x},
                {Attr("ksize", k), Attr("stride", p.stride() > 0 ? p.stride() : k), Attr("padding", padding)});
    return absl::OkStatus();
  }

  static const char* KindName(const LayerSpec& l) {
    switch (l.kind_case()) {
      case LayerSpec::kDense: return "dense";
      case LayerSpec::kConv2D: return "conv2d";
      case LayerSpec::kMaxPool: return "max_pool";
      case LayerSpec::kFlatten: return "flatten";
      case LayerSpec::kDropout: return "dropout";
      case LayerSpec::kActivation: return "activation";
      case LayerSpec::kReshape: return "reshape";
      default: return "layer";
    }
  }
  void Track(const LayerVars& v) {
    if (v.kernel.valid()) variables_.push_back(v.kernel);
    if (v.bias.valid()) variables_.push_back(v.bias);
  }

  const JobSpec& job_;
  const ModelSpec& model_;
  GraphBuilder* b_;
  std::vector<LayerVars> vars_;
  std::vector<Output> variables_;
};

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

  SequentialLowering lower(job, &b);
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
