// The optimizer part of lowering: schedules, weight decay, AdamW and
// gradient clipping become attributes, counts and nodes of the graph.
#include <cmath>
#include <string>

#include "absl/strings/match.h"
#include "google/protobuf/text_format.h"
#include "graph/attr.h"
#include "graph/lowering.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

constexpr char kModel[] = R"(model { input_shape: [4] num_classes: 3
    layer { dense { units: 5 activation: RELU } }
    layer { dense { units: 3 } } } )";

JobSpec Job(const std::string& rest) {
  JobSpec job;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(kModel + rest, &job)) << rest;
  return job;
}

// The update of variable `var` (the op reading it as input 0 that starts "Apply").
const Node* UpdateOf(const Graph& g, const std::string& var) {
  for (const auto& e : g.FindNode(var)->out_edges()) {
    if (absl::StartsWith(e.dst->op(), "Apply") && e.dst_input == 0) return e.dst;
  }
  return nullptr;
}

TEST(OptimizerLoweringTest, ScheduledMomentumCountsItsUpdates) {
  auto tg = LowerJob(Job(R"(steps: 100 optimizer {
      momentum { learning_rate: 0.1 momentum: 0.9 weight_decay: 5e-4 }
      schedule { warmup_steps: 10 cosine { alpha: 0.01 } } })"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  for (const std::string& v : tg->variables) {
    const Node* u = UpdateOf(*tg->graph, v);
    ASSERT_NE(u, nullptr) << v;
    EXPECT_EQ(u->op(), "ApplyMomentum");
    ASSERT_EQ(u->num_inputs(), 4);  // var, accum, t, grad
    EXPECT_EQ(u->input(2).node->name(), "optimizer/" + v + "/step");
    EXPECT_EQ(u->input(2).node->output_shape(0).rank(), 0);
    EXPECT_EQ(*GetStringAttr(u->def(), "decay"), "cosine");
    EXPECT_EQ(*GetIntAttr(u->def(), "decay_steps"), 90);  // the job's steps after the warm-up
    EXPECT_EQ(*GetIntAttr(u->def(), "warmup_steps"), 10);
    EXPECT_FLOAT_EQ(*GetFloatAttr(u->def(), "weight_decay"), 5e-4f);
  }
  auto rate = LearningRateOf(Job(R"(steps: 100 optimizer {
      momentum { learning_rate: 0.1 } schedule { warmup_steps: 10 cosine { alpha: 0.01 } } })"));
  ASSERT_TRUE(rate.ok()) << rate.status();
  EXPECT_NEAR(rate->At(5), 0.05, 1e-7);
  // As PyTorch's CosineAnnealingLR over the job's steps: the last update is
  // one decay step short of alpha lr.
  EXPECT_NEAR(rate->At(100), 0.1 * (0.01 + 0.99 * 0.5 * (1 + std::cos(M_PI * 89 / 90))), 1e-7);
  EXPECT_NEAR(rate->At(101), 0.001, 1e-7);
}

TEST(OptimizerLoweringTest, PlainSgdKeepsItsTwoInputs) {
  auto tg = LowerJob(Job("optimizer { sgd { learning_rate: 0.5 } }"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  const Node* u = UpdateOf(*tg->graph, tg->variables[0]);
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->num_inputs(), 2);
  EXPECT_FALSE(GetStringAttr(u->def(), "decay").ok());
}

TEST(OptimizerLoweringTest, AdamWDecaysAndClippingScalesEveryGradient) {
  auto tg = LowerJob(Job(R"(epochs: 2 optimizer { adamw { learning_rate: 0.002 } clip_global_norm: 1.5
      schedule { step { every_steps: 50 factor: 0.5 } } })"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  const Graph& g = *tg->graph;
  const Node* clip = nullptr;
  for (const auto& n : g.nodes()) {
    if (n->op() == "GlobalNormScale") clip = n.get();
  }
  ASSERT_NE(clip, nullptr);
  EXPECT_EQ(clip->num_inputs(), static_cast<int>(tg->variables.size()));
  EXPECT_FLOAT_EQ(*GetFloatAttr(clip->def(), "clip_norm"), 1.5f);
  for (const std::string& v : tg->variables) {
    const Node* u = UpdateOf(g, v);
    ASSERT_NE(u, nullptr) << v;
    EXPECT_EQ(u->op(), "ApplyAdam");
    EXPECT_FLOAT_EQ(*GetFloatAttr(u->def(), "weight_decay"), 0.01f);  // AdamW's default
    EXPECT_FLOAT_EQ(*GetFloatAttr(u->def(), "learning_rate"), 0.002f);
    EXPECT_EQ(*GetStringAttr(u->def(), "decay"), "step");
    // The gradient it applies is the clipped one.
    const Node* grad = u->input(4).node;
    EXPECT_EQ(grad->op(), "Mul");
    EXPECT_EQ(grad->input(1).node, clip);
  }
}

TEST(OptimizerLoweringTest, BadOptimizersNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"epochs: 3 optimizer { sgd {} schedule { cosine {} } }", "cosine.decay_steps is required"},
      {"steps: 10 optimizer { sgd {} schedule { warmup_steps: 10 cosine {} } }", "cosine.decay_steps is required"},
      {"optimizer { sgd {} schedule { warmup_steps: -1 } }", "warmup_steps must not be negative"},
      {"optimizer { sgd {} schedule { step { every_steps: 0 } } }", "every_steps > 0"},
      {"optimizer { sgd {} schedule { cosine { decay_steps: 5 alpha: 2 } } }", "alpha in [0, 1]"},
      {"optimizer { sgd { weight_decay: -0.1 } }", "weight_decay must be a non-negative number"},
      {"optimizer { adam { weight_decay: 0.1 } }", "use `adamw"},
      {"optimizer { adam {} clip_global_norm: -1 }", "clip_global_norm must be a positive number or 0"},
  };
  for (const auto& [job, want] : cases) {
    auto tg = LowerJob(Job(job));
    ASSERT_FALSE(tg.ok()) << job;
    EXPECT_NE(tg.status().message().find(want), std::string::npos) << job << ": " << tg.status();
  }
}

}  // namespace
}  // namespace weft
