#include "client/progress.h"

#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(ProgressTest, BarShowsStepsEpochLossRateAndEta) {
  TrainProgress p;
  p.step = 50;
  p.total_steps = 100;
  p.epoch = 2;
  p.epochs = 4;
  p.loss = 0.31234;
  p.samples_per_second = 68200;
  p.elapsed_seconds = 10;
  const std::string line = ProgressDisplay::BarLine(p, 20);
  EXPECT_TRUE(absl::StartsWith(line, "[==========>         ]")) << line;
  EXPECT_TRUE(absl::StrContains(line, "50/100 epoch 2/4")) << line;
  EXPECT_TRUE(absl::StrContains(line, "loss 0.3123")) << line;
  EXPECT_TRUE(absl::StrContains(line, "68.2k samples/s")) << line;
  EXPECT_TRUE(absl::StrContains(line, "ETA 0:10")) << line;  // 50 steps left at 5 steps/s
}

TEST(ProgressTest, PlainModePrintsATenthOfTheRunAndEpochEnds) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* out = open_memstream(&buf, &len);
  ASSERT_NE(out, nullptr);
  {
    ProgressDisplay d(out, /*terminal=*/false);
    TrainProgress p;
    p.total_steps = 1000;
    p.epochs = 2;
    for (int s = 1; s <= 1000; ++s) {
      p.step = s;
      p.epoch = s <= 500 ? 1 : 2;
      d.Update(p);
      if (s % 500 == 0) {
        p.epoch_end = true;
        // The first epoch as a regression's (a loss, no accuracy), the second a classifier's.
        p.test_accuracy = s == 500 ? -1 : 0.5;
        p.test_loss = 0.25;
        d.Update(p);
        p.epoch_end = false;
      }
    }
    d.Finish();
  }
  std::fclose(out);
  const std::string text(buf, len);
  std::free(buf);
  int lines = 0;
  for (char c : text) lines += c == '\n';
  EXPECT_EQ(lines, 10 + 2) << text;  // one line per tenth, plus two epoch ends
  EXPECT_TRUE(absl::StrContains(text, "epoch 2 done: step 1000/1000")) << text;
  EXPECT_TRUE(absl::StrContains(text, "epoch 1 done: step 500/1000 loss 0.0000 0 samples/s test loss 0.2500\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "test accuracy 0.5000\n")) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos);  // no bar redraws in a log
}

TEST(ProgressTest, NoticeClearsTheBarAndTheLogSaysWhereTrainingStands) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* out = open_memstream(&buf, &len);
  ASSERT_NE(out, nullptr);
  {
    ProgressDisplay plain(out, /*terminal=*/false);
    TrainProgress p;
    p.total_steps = 100;
    p.step = 50;
    plain.Update(p);  // prints; the next line is due at step 60
    plain.Notice("recovering: something");
    p.step = 40;      // resumed from an earlier checkpoint
    plain.Update(p);  // printed although before step 60
    ProgressDisplay bar(out, /*terminal=*/true);
    bar.Update(p);
    bar.Notice("on a terminal");
    bar.Update(p);  // redrawn at once, not held back for 100 ms
  }
  std::fclose(out);
  const std::string text(buf, len);
  std::free(buf);
  EXPECT_TRUE(absl::StrContains(text, "step 50/100 loss 0.0000 0 samples/s\nrecovering: something\n"
                                      "step 40/100 loss 0.0000 0 samples/s\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "\x1b[K\r\x1b[Kon a terminal\n\r[")) << text;
}

JobStatus RecoveredStatus() {
  JobStatus s;
  s.set_job_id("job-7");
  s.set_state(RECOVERING);
  s.set_step(430);
  s.set_restarts(2);
  s.set_failed_task("/job:worker/task:1");
  s.set_failure("task stopped answering heartbeats");
  s.set_failure_time_unix_ms(1700000000123);  // 2023-11-14 22:13:20 UTC
  s.set_checkpoint_step(400);
  s.set_checkpoint_path("/ckpt/step-000000000400");
  s.set_steps_lost(50);
  s.set_recovery_seconds(3.3);
  return s;
}

TEST(ProgressTest, RecoveryLinesNameTheTaskTheFailureAndTheCheckpoint) {
  JobStatus s = RecoveredStatus();
  EXPECT_EQ(RecoveringLine(s),
            "recovering (restart 2): task /job:worker/task:1 failed: task stopped answering heartbeats; "
            "checkpoint: step 400");
  s.set_state(RUNNING);
  EXPECT_EQ(RecoveredLine(s), "recovered (restart 2) after 3.3 s; 50 steps lost in all; training at step 430");
  JobStatus bare;
  bare.set_state(RECOVERING);
  bare.set_restarts(1);
  bare.set_checkpoint_step(-1);
  EXPECT_EQ(RecoveringLine(bare), "recovering (restart 1): no checkpoint yet");
}

TEST(ProgressTest, StatusDetailsShowOnlyWhatIsSet) {
  EXPECT_EQ(RecoveryDetails(RecoveredStatus()),
            "  restarts: 2\n"
            "  failed task: /job:worker/task:1\n"
            "  failure: task stopped answering heartbeats (at 2023-11-14 22:13:20 UTC)\n"
            "  checkpoint: step 400 in /ckpt/step-000000000400\n"
            "  steps lost: 50\n"
            "  recovery: 3.3 s\n");
  JobStatus quiet;  // never failed, no checkpoint
  quiet.set_state(RUNNING);
  quiet.set_checkpoint_step(-1);
  EXPECT_EQ(RecoveryDetails(quiet), "");
  JobStatus checkpointed;  // a checkpoint but no failure
  checkpointed.set_checkpoint_step(0);
  checkpointed.set_checkpoint_path("/c/step-000000000000");
  EXPECT_EQ(RecoveryDetails(checkpointed), "  checkpoint: step 0 in /c/step-000000000000\n");
}

TEST(ProgressTest, StatusJsonCarriesEveryRecoveryField) {
  EXPECT_EQ(RecoveryJsonFields(RecoveredStatus()),
            "\"restarts\": 2, \"failed_task\": \"/job:worker/task:1\", \"failure\": \"task stopped answering "
            "heartbeats\", \"failure_time_unix_ms\": 1700000000123, \"checkpoint_step\": 400, \"checkpoint_path\": "
            "\"/ckpt/step-000000000400\", \"steps_lost\": 50, \"recovery_seconds\": 3.300, \"workers\": [], "
            "\"membership_change\": []");
  JobStatus none;  // a master that sets none of them
  const std::string json = RecoveryJsonFields(none);
  EXPECT_TRUE(absl::StrContains(json, "\"restarts\": 0,")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"checkpoint_step\": -1,")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"failed_task\": \"\",")) << json;
}

// An elastic job's members and their changes, in text and JSON.
TEST(ProgressTest, AnElasticJobsMembershipAndItsChangesAreShown) {
  JobStatus s;
  s.add_workers("/job:worker/task:0");
  s.add_workers("/job:worker/task:1");
  MembershipChange* c = s.add_membership_change();
  c->set_step(97);
  c->set_time_unix_ms(1700000000123);
  c->add_left("/job:worker/task:2");
  c->set_workers(2);
  c->set_seconds(1.25);
  c->set_reason("task /job:worker/task:2 unreachable");
  EXPECT_EQ(RecoveryDetails(s),
            "  workers: /job:worker/task:0, /job:worker/task:1\n"
            "  membership: from step 97 (at 2023-11-14 22:13:20 UTC) on 2 worker(s) after 1.25 s; left: "
            "/job:worker/task:2; task /job:worker/task:2 unreachable\n");
  const std::string json = RecoveryJsonFields(s);
  EXPECT_TRUE(absl::StrContains(json, "\"workers\": [\"/job:worker/task:0\", \"/job:worker/task:1\"]")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"membership_change\": [{\"step\": 97, \"time_unix_ms\": 1700000000123, "
                                      "\"left\": [\"/job:worker/task:2\"], \"joined\": [], \"workers\": 2, "
                                      "\"seconds\": 1.250, \"reason\": \"task /job:worker/task:2 unreachable\"}]"))
      << json;
}

JobStatus StalledStatus() {
  JobStatus s;
  s.set_state(RUNNING);
  TaskStepTime* a = s.add_task_step_time();
  a->set_task("/job:worker/task:0");
  a->set_p50_seconds(0.0123);
  a->set_p99_seconds(0.0401);
  a->set_steps(128);
  TaskStepTime* b = s.add_task_step_time();
  b->set_task("/job:worker/task:1");
  b->set_p50_seconds(1.5);
  b->set_p99_seconds(2.25);
  b->set_steps(9);
  b->set_straggler(true);
  s.set_diagnosis("step 812 (41 s; median 12 ms) waits on worker:1: it did not answer within 2.0 s");
  s.set_diagnosis_active(true);
  s.set_diagnosis_time_unix_ms(1700000000123);
  return s;
}

TEST(ProgressTest, StatusShowsEachTasksStepTimeAndTheStall) {
  JobStatus s = StalledStatus();
  EXPECT_EQ(StepTimeDetails(s),
            "  step time per task:\n"
            "    task                      p50        p99  steps\n"
            "    /job:worker/task:0    12.3 ms    40.1 ms    128\n"
            "    /job:worker/task:1     1.50 s     2.25 s      9  straggler\n"
            "  stalled: step 812 (41 s; median 12 ms) waits on worker:1: it did not answer within 2.0 s\n");
  s.clear_task_step_time();
  s.set_diagnosis_active(false);
  EXPECT_EQ(StepTimeDetails(s),
            "  last stall: step 812 (41 s; median 12 ms) waits on worker:1: it did not answer within 2.0 s (at "
            "2023-11-14 22:13:20 UTC)\n");
  EXPECT_EQ(StepTimeDetails(JobStatus()), "");
}

TEST(ProgressTest, StatusJsonCarriesStepTimesAndTheDiagnosis) {
  const std::string json = StepTimeJsonFields(StalledStatus());
  EXPECT_TRUE(absl::StrContains(json,
                                "\"task_step_time\": [{\"task\": \"/job:worker/task:0\", \"p50_seconds\": 0.012300, "
                                "\"p99_seconds\": 0.040100, \"steps\": 128, \"straggler\": false}, {"))
      << json;
  EXPECT_TRUE(absl::StrContains(json, "\"straggler\": true}], \"diagnosis\": \"step 812 (41 s;")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"diagnosis_active\": true, \"diagnosis_time_unix_ms\": 1700000000123"))
      << json;
  EXPECT_EQ(StepTimeJsonFields(JobStatus()),
            "\"task_step_time\": [], \"diagnosis\": \"\", \"diagnosis_active\": false, \"diagnosis_time_unix_ms\": 0");
}

}  // namespace
}  // namespace weft
