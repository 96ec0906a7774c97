// Pipelined RunGraphs (RunGraphRequest.after_step_id): a step queued behind
// the one before it on the same graph runs only once that one has ended
// here, fails when it failed, and is failed by an AbortStep of its own, by
// the graph's deregistration and by shutdown; bad requests are refused.
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "common/tensor_proto_coding.h"
#include "common/test_util.h"
#include "gtest/gtest.h"
#include "runtime/testing/test_util.h"
#include "worker/local_worker.h"
#include "worker/worker.h"
#include "worker/worker_test_util.h"

namespace weft {
namespace worker {
namespace {

using testing::MakeRegisterRequest;
using testing::WaitFor;
using weft::testing::kWaitTimeout;
using weft::testing::WaitUntil;

// One call under way: its status once done.
struct Call {
  RunGraphRequest request;
  RunGraphResponse response;
  absl::Status status;
  absl::Notification finished;
  bool Done() const { return finished.HasBeenNotified(); }
  bool Wait() { return finished.WaitForNotificationWithTimeout(absl::Seconds(30)); }
};

// Two tasks; task 1's partition pulls h from task 0, so a step of task 1
// waits until task 0 runs the same step: the test decides when it ends.
class PipelinedStepsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WorkerOptions o0, o1;
    o0.task_index = 0;
    o1.task_index = 1;
    o0.puller = o1.puller = &puller_;
    o1.limits.max_queued_steps = 2;
    w0_ = std::make_unique<Worker>(o0);
    w1_ = std::make_unique<Worker>(o1);
    puller_.AddWorker(w0_.get());
    puller_.AddWorker(w1_.get());
    lw0_ = std::make_unique<LocalWorker>(w0_.get());
    lw1_ = std::make_unique<LocalWorker>(w1_.get());
    auto split = testing::BuildSplitGraph(3, 4, 2, /*seed=*/7);
    ASSERT_TRUE(split.ok()) << split.status();
    h0_ = Register(lw0_.get(), MakeRegisterRequest(split->part0, {"x"}, {"z"}));
    h1_ = Register(lw1_.get(), MakeRegisterRequest(split->part1, {}, {"y"}));
  }
  void TearDown() override {
    w0_->Shutdown();
    w1_->Shutdown();
  }

  std::string Register(WorkerInterface* w, const RegisterGraphRequest& req) {
    RegisterGraphResponse resp;
    absl::Status s = WaitFor([&](StatusCallback d) { w->RegisterGraphAsync(&req, &resp, d); });
    EXPECT_TRUE(s.ok()) << s;
    return resp.graph_handle();
  }
  // Starts task 1's step `step` behind `after` (0: none).
  void Start1(Call* c, int64_t step, int64_t after) {
    c->request.set_graph_handle(h1_);
    c->request.set_step_id(step);
    c->request.set_after_step_id(after);
    lw1_->RunGraphAsync(&c->request, &c->response, absl::InfiniteDuration(), [c](const absl::Status& s) {
      c->status = s;
      c->finished.Notify();
    });
  }
  // Runs task 0's step `step` to its end.
  absl::Status Run0(int64_t step) {
    RunGraphRequest r;
    r.set_graph_handle(h0_);
    r.set_step_id(step);
    NamedTensorProto* x = r.add_send();
    x->set_name("x");
    TensorToProto(weft::testing::RandomTensor({3, 4}, step), x->mutable_tensor());
    RunGraphResponse resp;
    return WaitFor([&](StatusCallback d) { lw0_->RunGraphAsync(&r, &resp, absl::InfiniteDuration(), d); });
  }
  // The step ids task 1's flight recorder has seen start.
  std::vector<int64_t> Started1() {
    GetStepStateRequest req;
    GetStepStateResponse resp;
    EXPECT_TRUE(WaitFor([&](StatusCallback d) { w1_->GetStepStateAsync(&req, &resp, d); }).ok());
    std::vector<int64_t> ids;
    for (const StepRecord& r : resp.recent_step()) ids.push_back(r.step_id());
    return ids;
  }
  absl::Status Abort1(int64_t step, const std::string& why) {
    AbortStepRequest a;
    a.set_step_id(step);
    a.set_code(static_cast<int>(absl::StatusCode::kAborted));
    a.set_message(why);
    AbortStepResponse r;
    return WaitFor([&](StatusCallback d) { lw1_->AbortStepAsync(&a, &r, d); });
  }

  InProcessTensorPuller puller_;
  std::unique_ptr<Worker> w0_, w1_;
  std::unique_ptr<LocalWorker> lw0_, lw1_;
  std::string h0_, h1_;
};

TEST_F(PipelinedStepsTest, AQueuedStepStartsOnlyOnceTheStepBeforeItHasEnded) {
  Call five, six;
  Start1(&five, 5, 0);
  Start1(&six, 6, 5);
  ASSERT_TRUE(
      WaitUntil(kWaitTimeout, "step 5 to wait for task 0", [&] { return w0_->rendezvous_mgr()->NumSteps() > 0; }));
  EXPECT_EQ(Started1(), std::vector<int64_t>{5});  // six waits without starting
  EXPECT_FALSE(six.Done());

  ASSERT_TRUE(Run0(5).ok());
  ASSERT_TRUE(five.Wait());
  ASSERT_TRUE(five.status.ok()) << five.status;
  ASSERT_TRUE(Run0(6).ok());
  ASSERT_TRUE(six.Wait());
  ASSERT_TRUE(six.status.ok()) << six.status;
  EXPECT_EQ(Started1(), (std::vector<int64_t>{5, 6}));
  EXPECT_GT(six.response.queued_us(), 0);
  EXPECT_EQ(five.response.queued_us(), 0);

  // Behind a step that has already ended, a step starts at once.
  Call seven;
  Start1(&seven, 7, 6);
  ASSERT_TRUE(Run0(7).ok());
  ASSERT_TRUE(seven.Wait());
  EXPECT_TRUE(seven.status.ok()) << seven.status;
}

TEST_F(PipelinedStepsTest, AStepBehindAFailedOneFailsNamingIt) {
  Call seven, eight, nine;
  Start1(&seven, 7, 0);
  Start1(&eight, 8, 7);
  Start1(&nine, 9, 8);
  ASSERT_TRUE(Abort1(7, "task 0 failed").ok());
  for (Call* c : {&seven, &eight, &nine}) ASSERT_TRUE(c->Wait());
  EXPECT_TRUE(absl::StrContains(seven.status.message(), "task 0 failed")) << seven.status;
  EXPECT_EQ(eight.status.code(), absl::StatusCode::kAborted) << eight.status;
  EXPECT_TRUE(absl::StrContains(eight.status.message(), "step 7, which step 8 follows on graph")) << eight.status;
  EXPECT_TRUE(absl::StrContains(nine.status.message(), "step 8, which step 9 follows")) << nine.status;
  EXPECT_EQ(Started1(), std::vector<int64_t>({7, 8, 9}));  // recorded as failed, never run

  // One that arrives after the failure fails at once too.
  Call ten;
  Start1(&ten, 10, 9);
  ASSERT_TRUE(ten.Wait());
  EXPECT_EQ(ten.status.code(), absl::StatusCode::kAborted) << ten.status;
}

TEST_F(PipelinedStepsTest, AnAbortStepFailsAQueuedStepWhoseStepBeforeNeverCame) {
  Call twelve;
  Start1(&twelve, 12, 11);  // step 11 never arrives
  EXPECT_FALSE(twelve.finished.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  ASSERT_TRUE(Abort1(12, "the master gave up on step 11").ok());
  ASSERT_TRUE(twelve.Wait());
  EXPECT_EQ(twelve.status.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(absl::StrContains(twelve.status.message(), "gave up on step 11")) << twelve.status;
}

TEST_F(PipelinedStepsTest, BadRequestsAreRefusedNamingWhatIsWrong) {
  Call same, unknown;
  Start1(&same, 20, 20);
  ASSERT_TRUE(same.Wait());
  EXPECT_EQ(same.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(same.status.message(), "after_step_id 20 must be below the step's id 20"))
      << same.status;

  unknown.request.set_graph_handle("g0_forged");
  unknown.request.set_step_id(22);
  unknown.request.set_after_step_id(21);
  lw1_->RunGraphAsync(&unknown.request, &unknown.response, absl::InfiniteDuration(), [&](const absl::Status& s) {
    unknown.status = s;
    unknown.finished.Notify();
  });
  ASSERT_TRUE(unknown.Wait());
  EXPECT_EQ(unknown.status.code(), absl::StatusCode::kNotFound) << unknown.status;

  // Task 1 lets two steps wait per graph (--max_queued_steps=2).
  Call a, b, c;
  Start1(&a, 31, 30);
  Start1(&b, 32, 31);
  Start1(&c, 33, 32);
  ASSERT_TRUE(c.Wait());
  EXPECT_EQ(c.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(c.status.message(), "--max_queued_steps=2")) << c.status;
  EXPECT_FALSE(a.Done());
  EXPECT_FALSE(b.Done());
  ASSERT_TRUE(Abort1(31, "done with the test").ok());
  ASSERT_TRUE(a.Wait() && b.Wait());
  EXPECT_EQ(b.status.code(), absl::StatusCode::kAborted) << b.status;
}

TEST_F(PipelinedStepsTest, DeregisteringTheGraphOrShuttingDownFailsItsQueuedSteps) {
  Call q;
  Start1(&q, 41, 40);
  DeregisterGraphRequest d;
  d.set_graph_handle(h1_);
  DeregisterGraphResponse dr;
  ASSERT_TRUE(WaitFor([&](StatusCallback cb) { lw1_->DeregisterGraphAsync(&d, &dr, cb); }).ok());
  ASSERT_TRUE(q.Wait());
  EXPECT_EQ(q.status.code(), absl::StatusCode::kFailedPrecondition) << q.status;
  EXPECT_TRUE(absl::StrContains(q.status.message(), "deregistered while the step waited")) << q.status;

  h1_ = Register(lw1_.get(), MakeRegisterRequest(testing::BuildSplitGraph(3, 4, 2, 7)->part1, {}, {"y"}));
  Call r;
  Start1(&r, 51, 50);
  w1_->Shutdown();
  ASSERT_TRUE(r.Done());
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
}

}  // namespace
}  // namespace worker
}  // namespace weft
