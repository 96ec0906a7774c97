#include "graph/lowering.h"

#include <algorithm>
#include <vector>

#include "google/protobuf/text_format.h"
#include "absl/strings/str_cat.h"
#include "graph/attr.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

JobSpec Job(const std::string& model) {
  JobSpec job;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(model, &job)) << model;
  return job;
}

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

TEST(LoweringTest, MlpHasVariablesLossAndOrderedUpdates) {
  auto tg = LowerJob(Job(R"(model { input_shape: [784] num_classes: 10
      layer { dense { units: 32 activation: RELU } }
      layer { dropout { rate: 0.5 } }
      layer { dense { units: 10 activation: SOFTMAX } } }
      optimizer { momentum { learning_rate: 0.1 momentum: 0.9 } })"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  EXPECT_EQ(tg->variables.size(), 4u);  // two kernels, two biases
  const Graph& g = *tg->graph;
  const Endpoint loss = *g.FindEndpoint(tg->loss);
  EXPECT_EQ(loss.node->output_shape(loss.index).rank(), 0);
  // The final softmax is folded into the loss: logits feed the cross-entropy directly.
  EXPECT_EQ(g.FindNode("xent")->input(0).node->op(), "BiasAdd");
  // The nodes a training step runs: everything the train op depends on.
  std::vector<bool> in_step(g.num_nodes(), false);
  std::vector<const Node*> work{g.FindNode(tg->train_op)};
  while (!work.empty()) {
    const Node* n = work.back();
    work.pop_back();
    if (in_step[n->id()]) continue;
    in_step[n->id()] = true;
    for (const Endpoint& e : n->inputs()) work.push_back(e.node);
    for (const Node* c : n->control_inputs()) work.push_back(c);
  }
  // Each update waits for every training-step reader of its variable.
  int checked = 0;
  for (const std::string& v : tg->variables) {
    Node* var = g.FindNode(v);
    Node* update = nullptr;
    for (const auto& e : var->out_edges()) {
      if (e.dst->op() == "ApplyMomentum") update = e.dst;
    }
    ASSERT_NE(update, nullptr) << v;
    for (const auto& e : var->out_edges()) {
      if (e.dst == update || !in_step[e.dst->id()]) continue;
      bool ordered = false;
      for (Node* c : update->control_inputs()) ordered |= (c == e.dst);
      EXPECT_TRUE(ordered) << e.dst->name() << " reads " << v << " but is not ordered before its update";
    }
    // Evaluation-only readers must not be dragged into the training step.
    for (Node* c : update->control_inputs()) EXPECT_NE(c->name().rfind("eval/", 0), 0u) << c->name();
    ++checked;
  }
  EXPECT_EQ(checked, 4);
  EXPECT_TRUE(in_step[g.FindNode("layer0_dense/MatMul")->id()]);
  EXPECT_FALSE(in_step[g.FindNode("correct")->id()]);
  // Dropout only in the training pass.
  int dropouts = 0;
  for (const auto& n : g.nodes()) dropouts += n->op() == "Dropout";
  EXPECT_EQ(dropouts, 1);
}

TEST(LoweringTest, CnnShapesFlowThroughConvAndPool) {
  auto tg = LowerJob(Job(R"(model { input_shape: [28, 28, 1] num_classes: 10
      layer { conv2d { filters: 4 kernel_size: 3 activation: RELU } }
      layer { max_pool { pool_size: 2 } }
      layer { conv2d { filters: 8 kernel_size: 3 padding: "VALID" } }
      layer { max_pool {} }
      layer { flatten {} }
      layer { dense { units: 10 } } } optimizer { adam {} })"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  // 28 -> pool 14 -> valid conv 12 -> pool 6: 6*6*8 features into the dense layer.
  EXPECT_EQ(tg->graph->FindNode("layer5_dense/kernel")->output_shape(0), TensorShape({288, 10}));
}

TEST(LoweringTest, BadModelsNameTheLayer) {
  auto dense_on_image = LowerJob(Job(R"(model { input_shape: [28, 28, 1] num_classes: 10
      layer { dense { units: 10 } } })"));
  ASSERT_FALSE(dense_on_image.ok());
  EXPECT_NE(Msg(dense_on_image.status()).find("layer 0"), std::string::npos) << dense_on_image.status();
  EXPECT_NE(Msg(dense_on_image.status()).find("flatten"), std::string::npos);

  auto wrong_classes = LowerJob(Job(R"(model { input_shape: [784] num_classes: 10
      layer { dense { units: 7 } } })"));
  ASSERT_FALSE(wrong_classes.ok());
  EXPECT_NE(Msg(wrong_classes.status()).find("num_classes=10"), std::string::npos) << wrong_classes.status();

  auto bad_rate = LowerJob(Job(R"(model { input_shape: [784] num_classes: 10
      layer { dropout { rate: 1.5 } } layer { dense { units: 10 } } })"));
  ASSERT_FALSE(bad_rate.ok());
  EXPECT_NE(Msg(bad_rate.status()).find("dropout.rate"), std::string::npos);

  // A reshape must keep each example's values: 784 is not 7 (nor 28 x 29).
  for (const char* shape : {"[7]", "[28, 29]", "[0, 784]"}) {
    auto regroups = LowerJob(Job(absl::StrCat(R"(model { input_shape: [784] num_classes: 10
        layer { reshape { shape: )", shape, R"( } } layer { dense { units: 10 } } })")));
    ASSERT_FALSE(regroups.ok()) << shape;
    EXPECT_NE(Msg(regroups.status()).find("layer 0"), std::string::npos) << regroups.status();
    EXPECT_NE(Msg(regroups.status()).find("reshape.shape"), std::string::npos) << regroups.status();
  }
  EXPECT_TRUE(LowerJob(Job(R"(model { input_shape: [784] num_classes: 10
      layer { reshape { shape: [28, 28, 1] } } layer { flatten {} } layer { dense { units: 10 } } })")).ok());

  EXPECT_FALSE(LowerJob(JobSpec()).ok());
}

// A residual block written with named inputs: the shortcut reads the stem,
// the join adds both branches; batch norm keeps moving statistics that the
// training step advances and evaluation reads.
TEST(LoweringTest, ResidualBlockWithBatchNorm) {
  auto tg = LowerJob(Job(R"(model { input_shape: [8, 8, 3] num_classes: 10
      layer { name: "stem" conv2d { filters: 4 kernel_size: 3 no_bias: true } }
      layer { name: "stem_bn" batch_norm { activation: RELU momentum: 0.9 } }
      layer { name: "a" conv2d { filters: 4 kernel_size: 3 } }
      layer { name: "join" inputs: ["stem_bn", "a"] add { activation: RELU } }
      layer { global_avg_pool {} }
      layer { dense { units: 10 } } } optimizer { adam {} })"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  const Graph& g = *tg->graph;
  // Trainable: stem kernel (no bias), gamma, beta, a's kernel and bias, dense's two.
  EXPECT_EQ(tg->variables.size(), 7u);
  for (const char* v : {"stem_bn/moving_mean", "stem_bn/moving_variance"}) {
    ASSERT_NE(g.FindNode(v), nullptr) << v;
    EXPECT_EQ(std::count(tg->variables.begin(), tg->variables.end(), v), 0) << v << " is not trainable";
  }
  const Node* join = g.FindNode("join/AddN");
  ASSERT_NE(join, nullptr);
  EXPECT_EQ(join->input(0).node->name(), "stem_bn/Relu");
  EXPECT_EQ(join->input(1).node->name(), "a/BiasAdd");
  EXPECT_EQ(g.FindNode("layer5_dense/kernel")->output_shape(0), TensorShape({4, 10}));
  // The moving averages run with the train op, from the training pass's statistics.
  const Node* train = g.FindNode(tg->train_op);
  int moving = 0;
  for (const Node* c : train->control_inputs()) {
    if (c->op() != "ApplyMovingAverage") continue;
    ++moving;
    EXPECT_EQ(c->input(1).node->op(), "BatchNorm") << c->name();
  }
  EXPECT_EQ(moving, 2);
  // Evaluation normalises with the moving statistics.
  const Node* eval_bn = g.FindNode("eval/stem_bn/BatchNormInference");
  ASSERT_NE(eval_bn, nullptr);
  EXPECT_EQ(eval_bn->input(3).node->name(), "stem_bn/moving_mean");
  EXPECT_EQ(eval_bn->input(4).node->name(), "stem_bn/moving_variance");
}

// Layer norm has trainable gamma and beta and no moving statistics: training
// and evaluation run the same op on their own inputs.
TEST(LoweringTest, LayerNormHasTrainableScaleAndNoState) {
  auto tg = LowerJob(Job(R"(model { input_shape: [4, 4, 3] num_classes: 10
      layer { conv2d { filters: 6 kernel_size: 3 } }
      layer { name: "ln" layer_norm { activation: RELU epsilon: 0.01 } }
      layer { flatten {} }
      layer { dense { units: 10 } } } optimizer { adam {} })"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  const Graph& g = *tg->graph;
  for (const char* v : {"ln/gamma", "ln/beta"}) {
    ASSERT_NE(g.FindNode(v), nullptr) << v;
    EXPECT_EQ(g.FindNode(v)->output_shape(0), TensorShape({6})) << v;
    EXPECT_EQ(std::count(tg->variables.begin(), tg->variables.end(), v), 1) << v << " is trainable";
  }
  EXPECT_EQ(tg->variables.size(), 6u);  // conv's kernel and bias, gamma, beta, dense's two
  EXPECT_EQ(g.FindNode("ln/moving_mean"), nullptr);
  for (const char* name : {"ln/LayerNorm", "eval/ln/LayerNorm"}) {
    const Node* n = g.FindNode(name);
    ASSERT_NE(n, nullptr) << name;
    EXPECT_EQ(n->input(1).node->name(), "ln/gamma") << name;
    EXPECT_EQ(n->input(2).node->name(), "ln/beta") << name;
    EXPECT_EQ(n->output_shape(1), TensorShape({-1})) << name;  // a row per position of each example
  }
  EXPECT_EQ(g.FindNode("ln/Relu")->input(0).node->name(), "ln/LayerNorm");
  const Node* train = g.FindNode(tg->train_op);
  for (const Node* c : train->control_inputs()) EXPECT_NE(c->op(), "ApplyMovingAverage") << c->name();
  // The gradient reaches gamma and beta through LayerNormGrad.
  int grads = 0;
  for (int i = 0; i < g.num_nodes(); ++i) grads += g.node(i) != nullptr && g.node(i)->op() == "LayerNormGrad";
  EXPECT_EQ(grads, 1);
}

TEST(LoweringTest, BadTopologiesNameTheLayer) {
  struct Case {
    const char* layers;
    const char* want;
  };
  for (const Case& c : std::vector<Case>{
           {R"(layer { name: "x" dense { units: 10 } } layer { inputs: ["later"] dense { units: 10 } })",
            "'later' names no earlier layer"},
           {R"(layer { name: "x" dense { units: 10 } } layer { name: "x" dense { units: 10 } })", "'x' is taken"},
           {R"(layer { name: "input" dense { units: 10 } })", "'input' is taken"},
           {R"(layer { dense { units: 10 } } layer { add {} })", "add needs two or more inputs"},
           {R"(layer { name: "a" dense { units: 10 } } layer { inputs: ["a", "input"] dense { units: 10 } })",
            "dense reads one input, got 2"},
           {R"(layer { name: "a" dense { units: 10 } } layer { inputs: ["a", "input"] add {} })",
            "add's inputs must have one shape"},
           {R"(layer { batch_norm { momentum: 1.5 } } layer { dense { units: 10 } })", "batch_norm.momentum"},
           {R"(layer { global_avg_pool {} } layer { dense { units: 10 } })", "global_avg_pool needs an image"},
           {R"(layer { name: "ln" layer_norm { epsilon: -1 } } layer { dense { units: 10 } })",
            "'ln': layer_norm.epsilon must be positive, got -1"},
       }) {
    auto tg = LowerJob(Job(absl::StrCat("model { input_shape: [784] num_classes: 10 ", c.layers, " }")));
    ASSERT_FALSE(tg.ok()) << c.layers;
    EXPECT_NE(Msg(tg.status()).find("model layer"), std::string::npos) << tg.status();
    EXPECT_NE(Msg(tg.status()).find(c.want), std::string::npos) << tg.status();
  }
}

TEST(LoweringTest, RawGraphNeedsItsNamedNodes) {
  auto missing = LowerJob(Job(R"(graph { graph { node { name: "x" op: "Placeholder"
      attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim: -1 dim: 4 } } } } }
      features: "x" })"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(Msg(missing.status()).find("'labels' is required"), std::string::npos) << missing.status();
  auto not_a_tensor = LowerJob(Job(R"(graph { graph { node { name: "x" op: "NoOp" } } features: "x" })"));
  ASSERT_FALSE(not_a_tensor.ok());
  EXPECT_NE(Msg(not_a_tensor.status()).find("'features'"), std::string::npos) << not_a_tensor.status();
}

TEST(LoweringTest, AJobsGraphMayNotNameAContainer) {
  auto shared = LowerJob(Job(R"(graph { graph { node { name: "w" op: "Variable"
      attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim: 2 } } }
      attr { key: "container" value { s: "c" } } } } features: "x" })"));
  ASSERT_FALSE(shared.ok());
  EXPECT_EQ(shared.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(shared.status()).find("variable 'w' names container 'c'"), std::string::npos) << shared.status();
}

// Token and position embeddings: trainable tables that both passes read,
// ids [batch, 16] to [batch, 16, 8], and the gradient reaching the token
// table through EmbeddingGrad and the position table through BiasAddGrad.
TEST(LoweringTest, EmbeddingsAreTrainableTablesAndBadSizesNameTheLayer) {
  auto tg = LowerJob(Job(R"(model { input_shape: [16] num_classes: 5
      layer { name: "tok" embedding { input_dim: 50 output_dim: 8 } }
      layer { name: "pos" position_embedding {} }
      layer { flatten {} }
      layer { dense { units: 5 } } } optimizer { adam {} })"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  const Graph& g = *tg->graph;
  for (auto [name, shape] : {std::pair{"tok/embeddings", TensorShape{50, 8}}, std::pair{"pos/embeddings",
                                                                                        TensorShape{16, 8}}}) {
    ASSERT_NE(g.FindNode(name), nullptr) << name;
    EXPECT_EQ(g.FindNode(name)->output_shape(0), shape) << name;
    EXPECT_EQ(std::count(tg->variables.begin(), tg->variables.end(), name), 1) << name << " is trainable";
  }
  EXPECT_EQ(tg->variables.size(), 4u);  // two tables, dense's kernel and bias
  for (const char* name : {"tok/Embedding", "eval/tok/Embedding"}) {
    const Node* n = g.FindNode(name);
    ASSERT_NE(n, nullptr) << name;
    EXPECT_EQ(n->input(0).node->name(), "tok/embeddings") << name;
    EXPECT_EQ(n->output_shape(0), TensorShape({-1, 16, 8})) << name;
  }
  int grads = 0;
  for (int i = 0; i < g.num_nodes(); ++i) grads += g.node(i) != nullptr && g.node(i)->op() == "EmbeddingGrad";
  EXPECT_EQ(grads, 1);

  struct Case {
    const char* layers;
    const char* want;
  };
  for (const Case& c : std::vector<Case>{
           {R"(layer { name: "tok" embedding { input_dim: 0 output_dim: 8 } })",
            "'tok': embedding.input_dim (the vocabulary size) must be positive, got 0"},
           {R"(layer { embedding { input_dim: -3 output_dim: 8 } })", "layer 0: embedding.input_dim"},
           {R"(layer { embedding { input_dim: 50 } })", "embedding.output_dim (the embedding width) must be positive"},
           {R"(layer { name: "pos" position_embedding {} })",
            "'pos': position_embedding needs a known [batch, sequence, features] input, got [?,16]"},
       }) {
    auto bad = LowerJob(
        Job(absl::StrCat("model { input_shape: [16] num_classes: 5 ", c.layers,
                         " layer { flatten {} } layer { dense { units: 5 } } }")));
    ASSERT_FALSE(bad.ok()) << c.layers;
    EXPECT_NE(Msg(bad.status()).find("model layer"), std::string::npos) << bad.status();
    EXPECT_NE(Msg(bad.status()).find(c.want), std::string::npos) << bad.status();
  }
}

// Self-attention on a sequence: four projections (q, k, v, output) around
// the fused Attention op, a dense layer applied position by position, then
// flatten and a classifier. Training and evaluation share the variables.
TEST(LoweringTest, MultiHeadAttentionOnASequence) {
  auto tg = LowerJob(Job(R"(model { input_shape: [8, 16] num_classes: 10
      layer { name: "mha" multi_head_attention { num_heads: 2 causal: true } }
      layer { name: "ff" dense { units: 12 activation: RELU } }
      layer { flatten {} }
      layer { dense { units: 10 } } } optimizer { adam {} })"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  const Graph& g = *tg->graph;
  for (const char* p : {"mha/query", "mha/key", "mha/value"}) {
    const std::string kernel = absl::StrCat(p, "/kernel"), bias = absl::StrCat(p, "/bias");
    ASSERT_NE(g.FindNode(kernel), nullptr) << kernel;
    EXPECT_EQ(g.FindNode(kernel)->output_shape(0), TensorShape({16, 16})) << kernel;  // key_dim 16 / 2 per head
    EXPECT_EQ(g.FindNode(bias)->output_shape(0), TensorShape({16})) << bias;
    EXPECT_EQ(std::count(tg->variables.begin(), tg->variables.end(), kernel), 1) << kernel << " is trainable";
    EXPECT_EQ(std::count(tg->variables.begin(), tg->variables.end(), bias), 1) << bias << " is trainable";
  }
  EXPECT_EQ(std::count(tg->variables.begin(), tg->variables.end(), "mha/attention_output/kernel"), 1);
  EXPECT_EQ(g.FindNode("ff/kernel")->output_shape(0), TensorShape({16, 12}));  // per position
  EXPECT_EQ(g.FindNode("layer3_dense/kernel")->output_shape(0), TensorShape({8 * 12, 10}));
  EXPECT_EQ(tg->variables.size(), 12u);  // 4 projections, ff, the classifier: a kernel and a bias each
  int attention = 0, grads = 0;
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node* n = g.node(i);
    if (n == nullptr) continue;
    if (n->op() == "Attention") {
      ++attention;
      EXPECT_EQ(n->output_shape(0), TensorShape({-1, 8, 16})) << n->name();
      EXPECT_EQ(n->output_shape(1), TensorShape({-1, 2, 8, 8})) << n->name();
      EXPECT_EQ(GetBoolAttr(n->def(), "causal").value_or(false), true) << n->name();
      EXPECT_EQ(GetIntAttr(n->def(), "num_heads").value_or(0), 2) << n->name();
      // Evaluation reads the training pass's variables.
      const Node* q_proj = n->input(0).node->input(0).node->input(0).node;  // Reshape <- BiasAdd <- MatMul
      EXPECT_EQ(q_proj->input(1).node->name(), "mha/query/kernel") << n->name();
    }
    grads += n->op() == "AttentionGrad";
  }
  EXPECT_EQ(attention, 2);  // training and evaluation
  EXPECT_EQ(grads, 1);
  EXPECT_NE(g.FindNode("eval/mha/Attention"), nullptr);

  struct Case {
    const char* layer;
    const char* want;
  };
  for (const Case& c : std::vector<Case>{
           {R"(name: "att" multi_head_attention { num_heads: 3 })",
            "'att': multi_head_attention.num_heads 3 does not divide the input's 16 features"},
           {R"(name: "att" multi_head_attention { num_heads: 0 })",
            "'att': multi_head_attention.num_heads must be >= 1, got 0"},
           {R"(name: "att" multi_head_attention { num_heads: 2 key_dim: -1 })", "'att': multi_head_attention.key_dim"},
       }) {
    auto bad = LowerJob(Job(absl::StrCat("model { input_shape: [8, 16] num_classes: 10 layer { ", c.layer,
                                         " } layer { flatten {} } layer { dense { units: 10 } } }")));
    ASSERT_FALSE(bad.ok()) << c.layer;
    EXPECT_NE(Msg(bad.status()).find(c.want), std::string::npos) << bad.status();
  }
  // key_dim need not divide anything: 3 heads of 5 on 16 features.
  auto odd = LowerJob(Job(R"(model { input_shape: [8, 16] num_classes: 10
      layer { name: "mha" multi_head_attention { num_heads: 3 key_dim: 5 } }
      layer { flatten {} } layer { dense { units: 10 } } })"));
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_EQ(odd->graph->FindNode("mha/query/kernel")->output_shape(0), TensorShape({16, 15}));
  EXPECT_EQ(odd->graph->FindNode("mha/attention_output/kernel")->output_shape(0), TensorShape({15, 16}));
  // Attention needs a sequence.
  auto flat = LowerJob(Job(R"(model { input_shape: [16] num_classes: 10
      layer { name: "mha" multi_head_attention { num_heads: 2 } } layer { dense { units: 10 } } })"));
  ASSERT_FALSE(flat.ok());
  EXPECT_NE(Msg(flat.status()).find("'mha': multi_head_attention needs a sequence input"), std::string::npos)
      << flat.status();
}

// eval.top_k > 1 adds InTopK over the evaluation logits' rows (a sequence
// model's [batch * positions, classes]); 0 or 1 adds nothing.
TEST(LoweringTest, EvalTopKAddsInTopKOverTheEvalLogitRows) {
  const std::string mlp = "model { input_shape: [4] num_classes: 10 layer { dense { units: 10 } } }";
  auto top5 = LowerJob(Job(mlp + " eval { top_k: 5 }"));
  ASSERT_TRUE(top5.ok()) << top5.status();
  ASSERT_EQ(top5->correct_top_k, "correct_top_k");
  const Node* n = top5->graph->FindNode("correct_top_k");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->op(), "InTopK");
  EXPECT_EQ(*GetIntAttr(n->def(), "k"), 5);
  EXPECT_EQ(n->output_shape(0), TensorShape{});
  for (const char* eval : {"", " eval { top_k: 0 }", " eval { top_k: 1 }"}) {
    auto off = LowerJob(Job(mlp + eval));
    ASSERT_TRUE(off.ok()) << off.status();
    EXPECT_TRUE(off->correct_top_k.empty()) << eval;
    EXPECT_EQ(off->graph->FindNode("correct_top_k"), nullptr) << eval;
  }
  // A sequence model: InTopK reads the reshaped rows.
  auto seq = LowerJob(Job(R"(model { input_shape: [8] num_classes: 256
      layer { embedding { input_dim: 256 output_dim: 4 } } layer { dense { units: 256 } } }
      eval { top_k: 3 })"));
  ASSERT_TRUE(seq.ok()) << seq.status();
  const Node* s = seq->graph->FindNode(seq->correct_top_k);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->input(0).node->name(), "eval/logits");
  EXPECT_EQ(s->input(0).node->output_shape(0), TensorShape({-1, 256}));
}

// An inception-like block: three branches of the stem (two convolutions and
// a SAME average pool) concatenated along the channels, then avg_pool,
// flatten and dense. The gradient splits the join with ConcatGrad.
TEST(LoweringTest, ConcatenatedBranchesThenAvgPool) {
  auto tg = LowerJob(Job(R"(model { input_shape: [8, 8, 3] num_classes: 10
      layer { name: "stem" conv2d { filters: 4 kernel_size: 3 activation: RELU } }
      layer { name: "b1" inputs: ["stem"] conv2d { filters: 2 kernel_size: 1 } }
      layer { name: "b3" inputs: ["stem"] conv2d { filters: 3 kernel_size: 3 } }
      layer { name: "bp" inputs: ["stem"] avg_pool { pool_size: 3 stride: 1 padding: "SAME" } }
      layer { name: "cat" inputs: ["b1", "b3", "bp"] concatenate {} }
      layer { name: "pool" avg_pool {} }
      layer { flatten {} }
      layer { dense { units: 10 } } })"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  const Graph& g = *tg->graph;
  const Node* cat = g.FindNode("cat/Concat");
  ASSERT_NE(cat, nullptr);
  ASSERT_EQ(cat->num_inputs(), 3);
  EXPECT_EQ(cat->input(0).node->name(), "b1/BiasAdd");
  EXPECT_EQ(cat->input(2).node->name(), "bp/AvgPool");
  EXPECT_EQ(cat->output_shape(0), TensorShape({-1, 8, 8, 9}));
  const Node* pool = g.FindNode("pool/AvgPool");
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->output_shape(0), TensorShape({-1, 4, 4, 9}));
  EXPECT_EQ(*GetIntAttr(pool->def(), "ksize"), 2);
  EXPECT_EQ(*GetIntAttr(pool->def(), "stride"), 2);
  ASSERT_NE(g.FindNode("eval/cat/Concat"), nullptr);
  int splits = 0, pool_grads = 0;
  for (int i = 0; i < g.num_nodes(); ++i) {
    if (g.node(i) == nullptr) continue;
    splits += g.node(i)->op() == "ConcatGrad";
    pool_grads += g.node(i)->op() == "AvgPoolGrad";
  }
  EXPECT_EQ(splits, 1);
  EXPECT_EQ(pool_grads, 2);
}

TEST(LoweringTest, BadConcatenateAndAvgPoolNameTheLayer) {
  struct Case {
    const char* layers;
    const char* want;
  };
  const std::string stem = R"(layer { name: "stem" conv2d { filters: 4 kernel_size: 3 } } )";
  for (const Case& c : std::vector<Case>{
           {R"(layer { name: "v" inputs: ["stem"] conv2d { filters: 2 kernel_size: 3 padding: "VALID" } }
               layer { name: "cat" inputs: ["stem", "v"] concatenate {} })",
            "'cat': concatenate's inputs must agree on every dimension but the last: input 0 (stem) is "
            "[?,8,8,4], input 1 (v) is [?,6,6,2]"},
           {R"(layer { name: "cat" concatenate {} })", "concatenate needs two or more inputs"},
           {R"(layer { name: "f" flatten {} } layer { name: "cat" inputs: ["stem", "f"] concatenate {} })",
            "'cat': concatenate's inputs must agree"},
           {R"(layer { name: "p" avg_pool { padding: "FULL" } })", "'p': avg_pool.padding must be SAME or VALID"},
           {R"(layer { flatten {} } layer { name: "p" avg_pool {} })", "'p': avg_pool needs an image input"},
       }) {
    auto tg = LowerJob(Job(absl::StrCat("model { input_shape: [8, 8, 3] num_classes: 10 ", stem, c.layers,
                                        " layer { flatten {} } layer { dense { units: 10 } } }")));
    ASSERT_FALSE(tg.ok()) << c.layers;
    EXPECT_NE(Msg(tg.status()).find(c.want), std::string::npos) << tg.status();
  }
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// A regression: float targets in, squared errors out, no accuracy.
TEST(LoweringTest, MeanSquaredErrorComparesOutputsWithFloatTargets) {
  const std::string series = R"(dataset { format: SERIES series { column: "v" window: 8 horizon: 2 } }
      optimizer { adam { learning_rate: 0.01 } } batch_size: 4)";
  auto tg = LowerJob(Job(absl::StrCat(R"(model { input_shape: [8, 1] loss: MEAN_SQUARED_ERROR
      layer { lstm { units: 4 } } layer { dense { units: 2 } } })",
                                      series)));
  ASSERT_TRUE(tg.ok()) << tg.status();
  const Graph& g = *tg->graph;
  const Endpoint labels = *g.FindEndpoint(tg->labels);
  EXPECT_EQ(labels.node->output_type(labels.index), DType::kFloat32);
  EXPECT_EQ(g.FindNode("squares")->op(), "Mul");
  EXPECT_EQ(g.FindNode("loss")->input(0).node->name(), "squares");
  EXPECT_EQ(g.FindNode("eval_loss")->input(0).node->name(), "eval/squares");
  EXPECT_TRUE(tg->correct.empty());
  EXPECT_TRUE(tg->correct_top_k.empty());

  // The wrong width, classes, another dataset or top-k are refused by name.
  auto error = [&](const std::string& model, const std::string& rest) {
    return Msg(LowerJob(Job(absl::StrCat(model, rest))).status());
  };
  const std::string regression = R"(model { input_shape: [8, 1] loss: MEAN_SQUARED_ERROR
      layer { lstm { units: 4 } } layer { dense { units: 3 } } })";
  EXPECT_NE(error(regression, series).find("[batch, targets=2]"), std::string::npos) << error(regression, series);
  const std::string classes = R"(model { input_shape: [8, 1] loss: MEAN_SQUARED_ERROR num_classes: 2
      layer { dense { units: 2 } } })";
  EXPECT_NE(error(classes, series).find("num_classes is 2"), std::string::npos) << error(classes, series);
  const std::string idx = R"(dataset { format: IDX } optimizer { sgd { learning_rate: 0.1 } })";
  EXPECT_NE(error(regression, idx).find("only a SERIES dataset"), std::string::npos) << error(regression, idx);
  EXPECT_NE(error(regression, series + " eval { top_k: 3 }").find("eval.top_k"), std::string::npos);
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// Binary cross-entropy: one logit, read as the two classes' logits [0, z].
TEST(LoweringTest, BinaryCrossEntropyReadsOneLogitAsTwoClasses) {
  const std::string rest = R"(optimizer { sgd { learning_rate: 0.1 } } batch_size: 8)";
  auto tg = LowerJob(Job(absl::StrCat(R"(model { input_shape: [4] num_classes: 2 loss: BINARY_CROSS_ENTROPY
      layer { dense { units: 3 activation: RELU } } layer { dense { units: 1 } } })",
                                      rest)));
  ASSERT_TRUE(tg.ok()) << tg.status();
  const Graph& g = *tg->graph;
  const Node* logits = g.FindNode("logits");
  ASSERT_NE(logits, nullptr);
  EXPECT_EQ(logits->op(), "Concat");
  EXPECT_EQ(logits->input(0).node->op(), "Sub");  // z - z: zeros shaped as z
  EXPECT_EQ(logits->output_shape(0), TensorShape({-1, 2}));
  EXPECT_EQ(g.FindNode("xent")->input(0).node, logits);
  EXPECT_EQ(g.FindNode("eval/predicted")->input(0).node->name(), "eval/logits");
  EXPECT_FALSE(tg->correct.empty());
  const Endpoint labels = *g.FindEndpoint(tg->labels);
  EXPECT_EQ(labels.node->output_type(labels.index), DType::kInt32);

  auto error = [&](const std::string& model) { return Msg(LowerJob(Job(absl::StrCat(model, rest))).status()); };
  const std::string wide = R"(model { input_shape: [4] num_classes: 2 loss: BINARY_CROSS_ENTROPY
      layer { dense { units: 2 } } })";
  EXPECT_NE(error(wide).find("[batch, 1] logits for BINARY_CROSS_ENTROPY"), std::string::npos) << error(wide);
  const std::string three = R"(model { input_shape: [4] num_classes: 3 loss: BINARY_CROSS_ENTROPY
      layer { dense { units: 1 } } })";
  EXPECT_NE(error(three).find("num_classes is 3"), std::string::npos) << error(three);
  const std::string top_k = R"(eval { top_k: 2 } model { input_shape: [4] num_classes: 2
      loss: BINARY_CROSS_ENTROPY layer { dense { units: 1 } } })";
  EXPECT_NE(error(top_k).find("eval.top_k"), std::string::npos) << error(top_k);
}

}  // namespace
}  // namespace weft
