#include "job/strategy_spec.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(StrategySpecTest, ReplicasToAggregateIsForSyncParameterServerOnly) {
  EXPECT_TRUE(TakesReplicasToAggregate(StrategySpec::PARAMETER_SERVER, true));
  EXPECT_FALSE(TakesReplicasToAggregate(StrategySpec::PARAMETER_SERVER, false));
  EXPECT_FALSE(TakesReplicasToAggregate(StrategySpec::MIRRORED, true));
  EXPECT_TRUE(CheckStrategyKinds(StrategySpec::PARAMETER_SERVER, true, 2, StrategySpec::AUTO).ok());
  absl::Status s = CheckStrategyKinds(StrategySpec::PARAMETER_SERVER, false, 1, StrategySpec::AUTO);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "strategy PARAMETER_SERVER does not take replicas_to_aggregate (1)"))
      << s;
  s = CheckStrategyKinds(StrategySpec::CENTRAL_STORAGE, true, -1, StrategySpec::AUTO);
  EXPECT_TRUE(absl::StrContains(s.message(), "CENTRAL_STORAGE does not take replicas_to_aggregate (-1)")) << s;
}

TEST(StrategySpecTest, CrossDeviceOpsIsForMirroredOnly) {
  EXPECT_TRUE(CheckStrategyKinds(StrategySpec::MIRRORED, true, 0, StrategySpec::NCCL).ok());
  absl::Status s = CheckStrategyKinds(StrategySpec::PARAMETER_SERVER, true, 0, StrategySpec::REDUCE_TO_FIRST_DEVICE);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "cross_device_ops REDUCE_TO_FIRST_DEVICE is for MIRRORED, not "
                                             "PARAMETER_SERVER"))
      << s;
}

TEST(StrategySpecTest, ReplicasToAggregateIsBoundedByTheReplicas) {
  for (int k : {0, 1, 3}) EXPECT_TRUE(CheckReplicasToAggregate(StrategySpec::PARAMETER_SERVER, k, 3).ok()) << k;
  for (int k : {-1, 4}) {
    absl::Status s = CheckReplicasToAggregate(StrategySpec::PARAMETER_SERVER, k, 3);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k;
    EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("replicas_to_aggregate ", k, " but 3 replicas"))) << s;
  }
}

}  // namespace
}  // namespace weft
