// GetStepState: what a task's running steps wait on, and its ring of last
// steps (StepRing).
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "common/tensor_proto_coding.h"
#include "common/test_util.h"
#include "gtest/gtest.h"
#include "worker/local_worker.h"
#include "worker/step_ring.h"
#include "worker/worker.h"
#include "worker/worker_test_util.h"

namespace weft {
namespace worker {
namespace {

using testing::kTask0;
using testing::kTask1;
using testing::MakeRegisterRequest;
using testing::WaitFor;
using weft::testing::kWaitTimeout;
using weft::testing::WaitUntil;

std::vector<StepRecord> Records(const StepRing& ring, absl::Time now) {
  google::protobuf::RepeatedPtrField<StepRecord> out;
  ring.Fill(&out, now);
  return std::vector<StepRecord>(out.begin(), out.end());
}

TEST(StepRingTest, KeepsTheLastStepsOldestFirstWithHowTheyEnded) {
  StepRing ring;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_TRUE(Records(ring, t0).empty());
  EXPECT_EQ(ring.Dump(t0), "no steps yet");
  for (int i = 0; i < StepRing::kCapacity + 3; ++i) {
    const uint64_t token = ring.Begin(100 + i, 1, t0 + absl::Seconds(i));
    ring.End(token, i == StepRing::kCapacity + 1 ? absl::AbortedError("peer failed") : absl::OkStatus(),
             t0 + absl::Seconds(i) + absl::Milliseconds(250));
  }
  const uint64_t running = ring.Begin(200, 4, t0 + absl::Seconds(50));
  std::vector<StepRecord> r = Records(ring, t0 + absl::Seconds(91));
  ASSERT_EQ(r.size(), static_cast<size_t>(StepRing::kCapacity));
  // The oldest kept is the one the ring has not overwritten yet.
  EXPECT_EQ(r.front().step_id(), 100 + 4);
  EXPECT_FALSE(r.front().running());
  EXPECT_DOUBLE_EQ(r.front().seconds(), 0.25);
  EXPECT_EQ(r.back().step_id(), 200);
  EXPECT_TRUE(r.back().running());
  EXPECT_EQ(r.back().iterations(), 4);
  EXPECT_DOUBLE_EQ(r.back().seconds(), 41);
  EXPECT_EQ(r.back().start_unix_ms(), absl::ToUnixMillis(t0 + absl::Seconds(50)));
  const StepRecord& failed = r[r.size() - 3];
  EXPECT_EQ(failed.step_id(), 100 + StepRing::kCapacity + 1);
  EXPECT_TRUE(absl::StrContains(failed.error(), "peer failed")) << failed.error();
  const std::string dump = ring.Dump(t0 + absl::Seconds(91));
  EXPECT_TRUE(absl::StrContains(dump, "step 200 (4 iterations) running 41.000 s")) << dump;
  EXPECT_TRUE(absl::StrContains(dump, "ABORTED: peer failed")) << dump;
  // An End for an entry the ring has overwritten is dropped.
  for (int i = 0; i < StepRing::kCapacity; ++i) ring.Begin(300 + i, 1, t0);
  ring.End(running, absl::OkStatus(), t0);
  for (const StepRecord& rec : Records(ring, t0)) EXPECT_GE(rec.step_id(), 300);
}

// Task 1's partition waits for h, which task 0 (never run) does not send.
class StepStateTest : public ::testing::Test {
 protected:
  StepStateTest() {
    WorkerOptions o0, o1;
    o1.task_index = 1;
    o0.puller = o1.puller = &puller_;
    w0_ = std::make_unique<Worker>(o0);
    w1_ = std::make_unique<Worker>(o1);
    puller_.AddWorker(w0_.get());
    puller_.AddWorker(w1_.get());
    lw1_ = std::make_unique<LocalWorker>(w1_.get());
  }
  ~StepStateTest() override {
    w0_->Shutdown();
    w1_->Shutdown();
  }

  GetStepStateResponse State() {
    GetStepStateRequest req;
    GetStepStateResponse resp;
    absl::Status s = WaitFor([&](StatusCallback d) { lw1_->GetStepStateAsync(&req, &resp, absl::Seconds(5), d); });
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }

  InProcessTensorPuller puller_;
  std::unique_ptr<Worker> w0_, w1_;
  std::unique_ptr<LocalWorker> lw1_;
};

TEST_F(StepStateTest, NamesTheRecvAStepWaitsOnAndRecordsItsAbort) {
  auto split = testing::BuildSplitGraph(3, 4, 2, /*seed=*/7);
  ASSERT_TRUE(split.ok()) << split.status();
  RegisterGraphRequest reg = MakeRegisterRequest(split->part1, {}, {"y"});
  RegisterGraphResponse handle;
  ASSERT_TRUE(WaitFor([&](StatusCallback d) { lw1_->RegisterGraphAsync(&reg, &handle, d); }).ok());
  GetStepStateResponse idle = State();
  EXPECT_EQ(idle.task(), kTask1);
  EXPECT_EQ(idle.running_op_size(), 0);
  EXPECT_EQ(idle.recent_step_size(), 0);

  RunGraphRequest run;
  run.set_graph_handle(handle.graph_handle());
  run.set_step_id(5);
  RunGraphResponse out;
  absl::Notification finished;
  lw1_->RunGraphAsync(&run, &out, absl::InfiniteDuration(), [&](const absl::Status&) { finished.Notify(); });
  GetStepStateResponse state;
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "task 1's _Recv to show as running", [&] {
    state = State();
    return state.running_op_size() > 0;
  }));
  ASSERT_EQ(state.running_op_size(), 1) << state.DebugString();
  const RunningOp& op = state.running_op(0);
  EXPECT_EQ(op.step_id(), 5);
  EXPECT_EQ(op.op(), "_Recv");
  EXPECT_EQ(op.peer_task(), kTask0);
  EXPECT_FALSE(op.tensor_name().empty());
  EXPECT_TRUE(absl::StartsWith(op.device(), kTask1)) << op.device();
  EXPECT_GE(op.elapsed_seconds(), 0);
  ASSERT_EQ(state.recent_step_size(), 1);
  EXPECT_EQ(state.recent_step(0).step_id(), 5);
  EXPECT_TRUE(state.recent_step(0).running());

  AbortStepRequest abort;
  abort.set_step_id(5);
  abort.set_code(static_cast<int>(absl::StatusCode::kAborted));
  abort.set_message("worker 0 went away");
  AbortStepResponse ar;
  ASSERT_TRUE(WaitFor([&](StatusCallback d) { lw1_->AbortStepAsync(&abort, &ar, d); }).ok());
  ASSERT_TRUE(finished.WaitForNotificationWithTimeout(kWaitTimeout)) << "AbortStep did not end the step";
  GetStepStateResponse after = State();
  EXPECT_EQ(after.running_op_size(), 0) << after.DebugString();
  ASSERT_EQ(after.recent_step_size(), 1);
  EXPECT_FALSE(after.recent_step(0).running());
  EXPECT_TRUE(absl::StrContains(after.recent_step(0).error(), "worker 0 went away")) << after.DebugString();
}

}  // namespace
}  // namespace worker
}  // namespace weft
