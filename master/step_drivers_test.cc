// The step arithmetic of a distributed job and the signatures its steps
// register (master/step_drivers.h).
#include "master/step_drivers.h"

#include <string>

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace weft {
namespace master {
namespace {

JobSpec Job(const std::string& text) {
  JobSpec job;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &job)) << text;
  return job;
}

// ---- Step arithmetic ----

TEST(CountStepsTest, SyncStepsRunEveryReplicaOnTheGlobalBatch) {
  // 2 replicas of batch 8 (global 16) over 100 examples: shards of 50 hold
  // 6 batches each, so an epoch is 6 sync steps of 16 examples.
  const StepCounts c = CountSteps(Job("batch_size: 16 epochs: 3"), 100, 2, 8, /*sync=*/true, 0);
  EXPECT_EQ(c.step_examples, 16);
  EXPECT_EQ(c.batches_per_epoch, 6);
  EXPECT_EQ(c.total_steps, 18);
}

TEST(CountStepsTest, AsyncReplicasTakeTurnsInTheCount) {
  // Each async step is one replica's batch: the epoch is both replicas' 6.
  const StepCounts c = CountSteps(Job("batch_size: 16 epochs: 3"), 100, 2, 8, /*sync=*/false, 0);
  EXPECT_EQ(c.step_examples, 8);
  EXPECT_EQ(c.batches_per_epoch, 12);
  EXPECT_EQ(c.total_steps, 36);
}

TEST(CountStepsTest, AGlobalStepOfKOfNAppliesKBatches) {
  // 3 replicas of batch 4 over 120 examples: 10 batches each, 30 replica
  // steps an epoch; 2 of them make a global step of 8 examples.
  const StepCounts c = CountSteps(Job("batch_size: 12 epochs: 2"), 120, 3, 4, /*sync=*/true, 2);
  EXPECT_EQ(c.step_examples, 8);
  EXPECT_EQ(c.batches_per_epoch, 15);
  EXPECT_EQ(c.total_steps, 30);
}

TEST(CountStepsTest, StepsWinOverEpochsAndUnevenShardsCountTheSmallest) {
  // 31 examples over 2 replicas: shards of 16 and 15, so one batch of 8
  // each (not 31 / 8 = 3 batches between them).
  StepCounts c = CountSteps(Job("batch_size: 16 epochs: 3"), 31, 2, 8, /*sync=*/true, 0);
  EXPECT_EQ(c.batches_per_epoch, 1);
  EXPECT_EQ(c.total_steps, 3);
  c = CountSteps(Job("batch_size: 16 epochs: 3"), 31, 2, 8, /*sync=*/false, 0);
  EXPECT_EQ(c.batches_per_epoch, 2);
  c = CountSteps(Job("batch_size: 16 epochs: 3 steps: 7"), 101, 2, 8, /*sync=*/true, 0);
  EXPECT_EQ(c.batches_per_epoch, 6);
  EXPECT_EQ(c.total_steps, 7);
  // Fewer examples than a batch: no step at all (the training loop refuses
  // such a job, naming the examples).
  c = CountSteps(Job("batch_size: 16 epochs: 3"), 15, 1, 16, /*sync=*/true, 0);
  EXPECT_EQ(c.batches_per_epoch, 0);
  EXPECT_EQ(c.total_steps, 0);
}

// ---- Training signatures ----

DistributedPlan TwoReplicas() {
  DistributedPlan plan;
  plan.num_replicas = 2;
  for (int i = 0; i < 2; ++i) {
    ReplicaNames r;
    r.loss = absl::StrCat("replica_", i, "/loss");
    r.train_op = absl::StrCat("replica_", i, "/train");
    r.push_outcomes = {absl::StrCat("replica_", i, "/push")};
    plan.replicated.replicas.push_back(r);
  }
  plan.replicated.train_targets = {"apply"};
  return plan;
}

TEST(TrainingSignaturesTest, OneLockstepSignatureOrOnePerFreeReplica) {
  DistributedPlan plan = TwoReplicas();
  plan.sync = true;
  std::vector<Signature> s = TrainingSignatures(plan);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].first, (std::vector<std::string>{"replica_0/loss", "replica_1/loss"}));
  EXPECT_EQ(s[0].second, (std::vector<std::string>{"apply"}));

  plan.sync = false;
  s = TrainingSignatures(plan);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].first, (std::vector<std::string>{"replica_1/loss"}));
  EXPECT_EQ(s[1].second, (std::vector<std::string>{"replica_1/train"}));

  // k of N: each replica also fetches its pushes' outcomes.
  plan.sync = true;
  plan.replicas_to_aggregate = 1;
  s = TrainingSignatures(plan);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].first, (std::vector<std::string>{"replica_0/loss", "replica_0/push"}));
  EXPECT_EQ(s[0].second, (std::vector<std::string>{"replica_0/train"}));
}

// steps_per_execution 0: one step until one is timed, then as many as fill
// about kTarget, a pipelined dispatch timed from the end of the one before.
TEST(AutoStepsPerDispatchTest, FollowsTheMeasuredStepTime) {
  AutoStepsPerDispatch a;
  EXPECT_EQ(a.Next(), 1);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  a.Ended(1, t0, t0 + absl::Milliseconds(2));  // 2 ms a step
  EXPECT_EQ(a.Next(), absl::ToInt64Milliseconds(AutoStepsPerDispatch::kTarget) / 2);
  // Issued long before, it started when the one before ended: 10 steps in
  // 20 ms, still 2 ms a step.
  a.Ended(10, t0, t0 + absl::Milliseconds(22));
  EXPECT_EQ(a.Next(), absl::ToInt64Milliseconds(AutoStepsPerDispatch::kTarget) / 2);
  AutoStepsPerDispatch fast, slow;
  fast.Ended(1000, t0, t0 + absl::Milliseconds(1));
  EXPECT_EQ(fast.Next(), AutoStepsPerDispatch::kMaxSteps);
  slow.Ended(1, t0, t0 + absl::Seconds(1));
  EXPECT_EQ(slow.Next(), 1);
}

}  // namespace
}  // namespace master
}  // namespace weft
