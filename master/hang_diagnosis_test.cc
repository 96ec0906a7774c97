#include "master/hang_diagnosis.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace weft {
namespace master {
namespace {

constexpr char kW0[] = "/job:worker/task:0";
constexpr char kW1[] = "/job:worker/task:1";
constexpr char kPs[] = "/job:ps/task:0";
constexpr int64_t kStep = 1000;  // the session's step id

StalledStep Stalled(absl::Duration elapsed = absl::Seconds(41)) {
  StalledStep s;
  s.job_step = 812;
  s.first_step_id = kStep;
  s.elapsed = elapsed;
  s.median = absl::Milliseconds(12);
  return s;
}

TaskAnswer Answer(const std::string& task, bool pending = true) {
  TaskAnswer a;
  a.task = task;
  a.state.set_task(task);
  a.run_graph_pending = pending;
  return a;
}

TaskAnswer Silent(const std::string& task) {
  TaskAnswer a = Answer(task);
  a.status = absl::DeadlineExceededError("Deadline Exceeded");
  return a;
}

void AddOp(TaskAnswer* a, const std::string& node, const std::string& op, double seconds, int64_t step = kStep,
           const std::string& peer = "") {
  RunningOp* r = a->state.add_running_op();
  r->set_step_id(step);
  r->set_node(node);
  r->set_op(op);
  r->set_elapsed_seconds(seconds);
  r->set_peer_task(peer);
  r->set_tensor_name(node + ":0");
}

void AddCollective(TaskAnswer* a, const std::string& from, int missing, int64_t step = kStep) {
  PendingCollective* c = a->state.add_collective();
  c->set_step_id(step);
  c->set_recv_from_task(from);
  c->set_send_to_task(from);
  c->set_chunks_missing(missing);
  c->set_chunks_total(4);
}

TEST(HangDiagnosisTest, ASilentTaskIsBlamedAndTheOthersSayWhomTheyWaitFor) {
  TaskAnswer w0 = Answer(kW0);
  AddOp(&w0, "allreduce_0", "CollectiveAllReduce", 40);
  AddCollective(&w0, kW1, 2);
  const Diagnosis d = DiagnoseStall(Stalled(), {w0, Silent(kW1)}, absl::Seconds(2));
  EXPECT_EQ(d.line,
            "step 812 (41 s; median 12 ms) waits on worker:1: it did not answer within 2.0 s; "
            "worker:0 waits for its all-reduce chunk from worker:1");
  EXPECT_EQ(d.blamed, std::vector<std::string>{kW1});
}

TEST(HangDiagnosisTest, TheAwaitedTaskThatComputesIsBlamedNamingItsLongestOp) {
  TaskAnswer w0 = Answer(kW0), w1 = Answer(kW1), ps = Answer(kPs, /*pending=*/false);
  AddOp(&w0, "dense_2/MatMul", "_Recv", 41, kStep, kW1);
  AddOp(&w1, "dense_1/Relu", "Relu", 3);
  AddOp(&w1, "dense_2/MatMul", "MatMul", 41);
  AddOp(&w1, "old/MatMul", "MatMul", 900, /*step=*/kStep - 7);  // another step's: ignored
  const Diagnosis d = DiagnoseStall(Stalled(), {w0, w1, ps}, absl::Seconds(2));
  EXPECT_EQ(d.line,
            "step 812 (41 s; median 12 ms) waits on worker:1: op dense_2/MatMul running 41 s; "
            "worker:0 waits for tensor 'dense_2/MatMul:0' from worker:1");
  EXPECT_EQ(d.blamed, std::vector<std::string>{kW1});
}

TEST(HangDiagnosisTest, TheKeyIgnoresTimesButNotWhoIsBlamedForWhat) {
  TaskAnswer w0 = Answer(kW0);
  AddCollective(&w0, kW1, 2);
  const Diagnosis a = DiagnoseStall(Stalled(absl::Seconds(41)), {w0, Silent(kW1)}, absl::Seconds(2));
  const Diagnosis b = DiagnoseStall(Stalled(absl::Seconds(46)), {w0, Silent(kW1)}, absl::Seconds(2));
  EXPECT_NE(a.line, b.line);
  EXPECT_EQ(a.key, b.key);
  TaskAnswer w1 = Answer(kW1);
  AddOp(&w1, "dense_2/MatMul", "MatMul", 41);
  const Diagnosis c = DiagnoseStall(Stalled(), {w0, w1}, absl::Seconds(2));
  EXPECT_NE(c.key, a.key);
  EXPECT_EQ(c.blamed, std::vector<std::string>{kW1});
}

TEST(HangDiagnosisTest, WithNoOpRunningTheTaskWhoseRunGraphIsPendingIsBlamed) {
  const Diagnosis d =
      DiagnoseStall(Stalled(), {Answer(kW0, /*pending=*/false), Answer(kW1, /*pending=*/true)}, absl::Seconds(2));
  EXPECT_EQ(d.blamed, std::vector<std::string>{kW1});
  EXPECT_TRUE(absl::StrContains(d.line, "waits on worker:1: it runs no op of the step")) << d.line;
}

TEST(HangDiagnosisTest, ACheckpointWaitsOnTheTaskThatHasNotSavedItsShard) {
  StalledStep save = Stalled();
  save.checkpoint = true;
  save.trains = false;
  const Diagnosis d =
      DiagnoseStall(save, {Answer(kW0, /*pending=*/false), Answer(kW1, /*pending=*/true)}, absl::Seconds(2));
  EXPECT_EQ(d.blamed, std::vector<std::string>{kW1});
  EXPECT_TRUE(absl::StartsWith(d.line, "the checkpoint of step 812 (41 s; ")) << d.line;
  EXPECT_TRUE(absl::StrContains(d.line, "waits on worker:1: it answers, yet has not saved its shard")) << d.line;
}

TEST(HangDiagnosisTest, TasksWaitingOnEachOtherBlameTheMostAwaited) {
  const std::string w2 = "/job:worker/task:2";
  TaskAnswer a = Answer(kW0), b = Answer(kW1), c = Answer(w2);
  AddCollective(&a, kW1, 1);
  AddCollective(&b, w2, 1);
  AddCollective(&c, kW1, 1);
  const Diagnosis d = DiagnoseStall(Stalled(), {a, b, c}, absl::Seconds(2));
  EXPECT_EQ(d.blamed, std::vector<std::string>{kW1});
  EXPECT_TRUE(absl::StrContains(d.line, "worker:1: it waits too, for its all-reduce chunk from worker:2")) << d.line;
}

TEST(HangDiagnosisTest, SeveralSilentTasksAreAllNamedAndErrorsAreReported) {
  TaskAnswer broken = Answer(kPs);
  broken.status = absl::UnimplementedError("task /job:ps/task:0: GetStepState is not served");
  StalledStep eval = Stalled();
  eval.trains = false;
  eval.median = absl::ZeroDuration();
  const Diagnosis d = DiagnoseStall(eval, {Silent(kW0), Silent(kW1), broken}, absl::Milliseconds(500));
  EXPECT_EQ(d.blamed, (std::vector<std::string>{kW0, kW1}));
  EXPECT_TRUE(absl::StartsWith(d.line,
                               "an evaluation step (after step 812) (41 s) waits on worker:0 (it did not answer "
                               "within 500 ms), worker:1 (it did not answer within 500 ms)"))
      << d.line;
  EXPECT_TRUE(absl::StrContains(d.line, "ps:0 could not say")) << d.line;
}

TEST(HangDiagnosisTest, NamesAndTimesReadShort) {
  EXPECT_EQ(ShortTaskName("/job:worker/task:12"), "worker:12");
  EXPECT_EQ(ShortTaskName("master"), "master");
  EXPECT_EQ(FormatSeconds(0.0123), "12 ms");
  EXPECT_EQ(FormatSeconds(2.46), "2.5 s");
  EXPECT_EQ(FormatSeconds(41.4), "41 s");
}

}  // namespace
}  // namespace master
}  // namespace weft
