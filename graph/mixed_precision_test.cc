// Mixed precision in the lowering: which MatMuls compute in half, and how
// loss scaling wires the scale, the unscaling, the skipping updates and the
// scale's own update into the training step.
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
    layer { dense { units: 3 } } } batch_size: 8 )";

JobSpec Job(const std::string& rest) {
  JobSpec job;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(kModel + rest, &job)) << rest;
  return job;
}

int CountOps(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node != nullptr && node->op() == op ? 1 : 0;
  return n;
}

TEST(MixedPrecisionTest, EveryMatMulComputesInFloat16AndTheLossIsScaled) {
  auto tg = LowerJob(Job("mixed_precision { compute: FLOAT16 }"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  int matmuls = 0;
  for (const auto& n : tg->graph->nodes()) {
    if (n == nullptr || n->op() != "MatMul") continue;
    ++matmuls;
    EXPECT_EQ(*GetStringAttrOr(n->def(), "compute_type", ""), "float16") << n->name();
  }
  // Forward, evaluation, and two gradients per dense layer but the first's
  // input gradient (features need none): at least 2 + 2 + 3.
  EXPECT_GE(matmuls, 7);
  const Node* scale = tg->graph->FindNode("loss_scale");
  ASSERT_NE(scale, nullptr);
  EXPECT_FLOAT_EQ(*GetFloatAttr(scale->def(), "init_value"), 32768.0f);
  ASSERT_EQ(CountOps(*tg->graph, "UnscaleGradients"), 1);
  ASSERT_EQ(CountOps(*tg->graph, "ApplyLossScale"), 1);
  EXPECT_EQ(*GetIntAttr(tg->graph->FindNode("loss_scale/update")->def(), "growth_interval"), 2000);
  // Every update of a model variable skips a step that overflowed, and
  // applies an unscaled gradient.
  for (const std::string& v : tg->variables) {
    const Node* update = nullptr;
    for (const auto& e : tg->graph->FindNode(v)->out_edges()) {
      if (absl::StartsWith(e.dst->op(), "Apply") && e.dst_input == 0) update = e.dst;
    }
    ASSERT_NE(update, nullptr) << v;
    EXPECT_TRUE(*GetBoolAttrOr(update->def(), "skip_nonfinite", false)) << v;
    EXPECT_EQ(update->input(update->num_inputs() - 1).node->op(), "UnscaleGradients") << v;
  }
  // The train op waits for the scale's update.
  bool waits = false;
  for (const Node* c : tg->graph->FindNode(tg->train_op)->control_inputs()) waits |= c->op() == "ApplyLossScale";
  EXPECT_TRUE(waits);
}

TEST(MixedPrecisionTest, Bfloat16NeedsNoLossScalingUnlessAsked) {
  auto plain = LowerJob(Job("mixed_precision { compute: BFLOAT16 }"));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->graph->FindNode("loss_scale"), nullptr);
  EXPECT_EQ(CountOps(*plain->graph, "UnscaleGradients"), 0);
  for (const auto& n : plain->graph->nodes()) {
    if (n != nullptr && n->op() == "MatMul") {
      EXPECT_EQ(*GetStringAttrOr(n->def(), "compute_type", ""), "bfloat16");
    }
  }
  auto scaled = LowerJob(Job(
      "mixed_precision { compute: BFLOAT16 loss_scaling: DYNAMIC initial_loss_scale: 256 growth_interval: 50 }"));
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  EXPECT_FLOAT_EQ(*GetFloatAttr(scaled->graph->FindNode("loss_scale")->def(), "init_value"), 256.0f);
  EXPECT_EQ(*GetIntAttr(scaled->graph->FindNode("loss_scale/update")->def(), "growth_interval"), 50);
  auto off = LowerJob(Job("mixed_precision { compute: FLOAT16 loss_scaling: NONE }"));
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->graph->FindNode("loss_scale"), nullptr);
}

TEST(MixedPrecisionTest, Float32LeavesTheGraphAsItWas) {
  auto tg = LowerJob(Job(""));
  ASSERT_TRUE(tg.ok()) << tg.status();
  for (const auto& n : tg->graph->nodes()) {
    if (n != nullptr && n->op() == "MatMul") {
      EXPECT_FALSE(n->def().attr().count("compute_type")) << n->name();
    }
  }
  EXPECT_EQ(tg->graph->FindNode("loss_scale"), nullptr);
}

TEST(MixedPrecisionTest, MicroBatchesScaleEachPassLoss) {
  auto tg = LowerJob(Job("mixed_precision { compute: FLOAT16 } optimizer { gradient_accumulation_steps: 2 }"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  // One scaled loss per pass (autodiff's Muls read the scale too).
  int scaled = 0;
  for (const auto& e : tg->graph->FindNode("loss_scale")->out_edges()) {
    const std::string& name = e.dst->name();
    scaled += e.dst->op() == "Mul" && (name == "scaled_loss" || name == "scaled_loss_1") ? 1 : 0;
  }
  EXPECT_EQ(scaled, 2);
}

TEST(MixedPrecisionTest, BadSettingsAreRefusedByField) {
  struct Case {
    const char* job;
    const char* error;
  };
  for (const Case& c : {
           Case{"mixed_precision { compute: FLOAT16 initial_loss_scale: 0.5 }", "initial_loss_scale"},
           Case{"mixed_precision { compute: FLOAT16 initial_loss_scale: inf }", "initial_loss_scale"},
           Case{"mixed_precision { compute: FLOAT16 growth_interval: -1 }", "growth_interval"},
           Case{"mixed_precision { compute: FLOAT16 } strategy { replicas_to_aggregate: 2 }", "replicas_to_aggregate"},
           Case{"mixed_precision { float16_all_reduce: true } strategy { kind: PARAMETER_SERVER }",
                "float16_all_reduce is for MULTI_WORKER_MIRRORED"},
       }) {
    auto tg = LowerJob(Job(c.job));
    ASSERT_FALSE(tg.ok()) << c.job;
    EXPECT_TRUE(absl::StrContains(tg.status().message(), c.error)) << tg.status();
  }
  JobSpec unknown = Job("");
  unknown.mutable_mixed_precision()->set_compute(static_cast<MixedPrecision::Compute>(7));
  EXPECT_TRUE(absl::StrContains(LowerJob(unknown).status().message(), "mixed_precision.compute 7"));
}

TEST(MixedPrecisionTest, AFloat16AllReduceAloneKeepsFloat32Products) {
  auto tg = LowerJob(Job("mixed_precision { float16_all_reduce: true } strategy { kind: MULTI_WORKER_MIRRORED }"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  EXPECT_EQ(tg->graph->FindNode("loss_scale"), nullptr);
  for (const auto& n : tg->graph->nodes()) {
    if (n != nullptr && n->op() == "MatMul") {
      EXPECT_FALSE(n->def().attr().count("compute_type")) << n->name();
    }
  }
}

TEST(MixedPrecisionTest, AGraphJobIsRefused) {
  JobSpec job;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"(graph { features: "x" labels: "y" loss: "l" train_op: "t" } mixed_precision { compute: FLOAT16 })", &job));
  auto tg = LowerJob(job);
  ASSERT_FALSE(tg.ok());
  EXPECT_TRUE(absl::StrContains(tg.status().message(), "mixed_precision needs a model")) << tg.status();
}

}  // namespace
}  // namespace weft
