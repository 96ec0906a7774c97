#include "job/defaults.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

// The same assertions as master/job_runner_test.cc's RecoverySettingsTest,
// which tests the master's use of these defaults.
TEST(DefaultsTest, RecoveryDefaultsAndTheMeaningOfMaxRestarts) {
  RecoverySettings r = EffectiveRecovery(RecoveryPolicy());
  EXPECT_EQ(r.heartbeat_interval, absl::Seconds(1));
  EXPECT_EQ(r.heartbeat_timeout, absl::Seconds(5));
  EXPECT_EQ(r.task_wait, absl::Seconds(120));
  EXPECT_EQ(r.max_restarts, 20);

  JobSpec job;
  RecoveryPolicy& p = *job.mutable_recovery();
  p.set_heartbeat_ms(50);
  p.set_heartbeat_timeout_ms(300);
  p.set_task_wait_seconds(7);
  p.set_max_restarts(3);
  r = EffectiveRecovery(job);
  EXPECT_EQ(r.heartbeat_interval, absl::Milliseconds(50));
  EXPECT_EQ(r.heartbeat_timeout, absl::Milliseconds(300));
  EXPECT_EQ(r.task_wait, absl::Seconds(7));
  EXPECT_EQ(r.max_restarts, 3);
  // -1 (or less): no recovery; negative durations fall back to defaults.
  p.set_max_restarts(-1);
  p.set_heartbeat_ms(-5);
  p.set_task_wait_seconds(-1);
  r = EffectiveRecovery(job);
  EXPECT_EQ(r.max_restarts, 0);
  EXPECT_EQ(r.heartbeat_interval, absl::Seconds(1));
  EXPECT_EQ(r.task_wait, absl::Seconds(120));
  p.set_max_restarts(-9);
  EXPECT_EQ(EffectiveRecovery(job).max_restarts, 0);
}

TEST(DefaultsTest, CheckpointKeepAndFusionBytes) {
  CheckpointPolicy ck;
  EXPECT_EQ(EffectiveCheckpointKeep(ck), 3);
  ck.set_keep(7);
  EXPECT_EQ(EffectiveCheckpointKeep(ck), 7);
  StrategySpec s;
  EXPECT_EQ(EffectiveFusionBytes(s), 4 << 20);
  s.set_fusion_bytes(-1);
  EXPECT_EQ(EffectiveFusionBytes(s), 4 << 20);
  s.set_fusion_bytes(1000);
  EXPECT_EQ(EffectiveFusionBytes(s), 1000);
}

TEST(DefaultsTest, OnlyParameterServerRunsAsync) {
  StrategySpec s;
  for (auto kind : {StrategySpec::MULTI_WORKER_MIRRORED, StrategySpec::MIRRORED, StrategySpec::CENTRAL_STORAGE}) {
    s.set_kind(kind);
    s.set_sync(false);
    EXPECT_TRUE(EffectiveSync(s)) << StrategySpec::Kind_Name(kind);
  }
  s.set_kind(StrategySpec::PARAMETER_SERVER);
  EXPECT_FALSE(EffectiveSync(s));
  s.set_sync(true);
  EXPECT_TRUE(EffectiveSync(s));
}

TEST(DefaultsTest, NumDevicesPrefersTheSettingThenTheGpus) {
  StrategySpec s;
  EXPECT_EQ(EffectiveNumDevices(s, 4, 0), 4);
  EXPECT_EQ(EffectiveNumDevices(s, 4, 2), 2);
  s.set_num_devices(3);
  EXPECT_EQ(EffectiveNumDevices(s, 4, 2), 3);
  // Not clamped: the caller reports a request for more than there are.
  s.set_num_devices(9);
  EXPECT_EQ(EffectiveNumDevices(s, 4, 2), 9);
}

TEST(DefaultsTest, ReplicaBatchSplitsEvenlyOrSaysWhy) {
  JobSpec job;
  job.set_batch_size(12);
  job.mutable_strategy()->set_kind(StrategySpec::PARAMETER_SERVER);
  auto b = ReplicaBatch(job, 3);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, 4);
  b = ReplicaBatch(job, 5);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(b.status().message(),
                                "strategy PARAMETER_SERVER splits batch_size 12 over 5 replicas; make it a multiple of 5"))
      << b.status();
  b = ReplicaBatch(job, 0);
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(absl::StrContains(b.status().message(), "no replicas")) << b.status();
}


TEST(DefaultsTest, AnElasticJobTrainsOnTheLargestWorkerCountThatSplitsItsBatch) {
  JobSpec job;
  job.set_batch_size(12);
  job.mutable_elastic()->set_min_workers(2);
  EXPECT_EQ(ElasticReplicaCount(job, 4), 4);
  EXPECT_EQ(ElasticReplicaCount(job, 5), 4);  // 5 does not divide 12: one stands by
  EXPECT_EQ(ElasticReplicaCount(job, 3), 3);
  EXPECT_EQ(ElasticReplicaCount(job, 2), 2);
  EXPECT_EQ(ElasticReplicaCount(job, 1), 0);  // below min_workers
  job.mutable_elastic()->set_max_workers(3);
  EXPECT_EQ(ElasticReplicaCount(job, 8), 3);
  job.set_batch_size(7);
  EXPECT_EQ(ElasticReplicaCount(job, 3), 0);  // only 1 and 7 divide 7
  job.mutable_elastic()->set_min_workers(0);
  EXPECT_EQ(ElasticReplicaCount(job, 3), 1);

  EXPECT_EQ(ElasticWait(job), absl::Seconds(kDefaultTaskWaitSeconds));
  job.mutable_recovery()->set_task_wait_seconds(7);
  EXPECT_EQ(ElasticWait(job), absl::Seconds(7));
  job.mutable_elastic()->set_wait_seconds(3);
  EXPECT_EQ(ElasticWait(job), absl::Seconds(3));
  job.mutable_elastic()->set_wait_seconds(-1);
  EXPECT_EQ(ElasticWait(job), absl::ZeroDuration());
}

}  // namespace
}  // namespace weft
