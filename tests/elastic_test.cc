// Elastic jobs with real processes, on a slice of Fashion-MNIST: a master
// and three workers as separate `weft` processes on loopback, over mTLS. A
// MULTI_WORKER_MIRRORED job with
// `elastic { min_workers: 2 }` loses a worker for good (SIGKILL, never
// restarted) mid-job; what must hold (docs/fault_tolerance.md, "Elastic
// jobs"):
//   - the job goes on with the two survivors and succeeds, with no
//     checkpoint restored (the master logs none) and no step lost;
//   - no step is trained twice or skipped: each survivor's step counter,
//     saved in the final checkpoint, is exactly the job's step count;
//   - the survivors hold the same variables, bit for bit;
//   - it ends within 0.5 accuracy points of an undisturbed run (the global
//     batch and the order of the examples do not change with the members);
//   - its status records the change (who left, from which step, how long it
//     took) and the master's log says so.
//
// The other tests grow a job: onto a worker that starts later, onto one the
// master was never told of (`weft worker --master` registers it), and as
// `weft scale` asks.
//
// The kill lands at a step drawn from the run's seed (WEFT_TEST_SEED=n
// replays it), printed with the figures:
//   [elastic] killed worker-2 at step X; went on from step Y with 2 workers in Z s
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/grpc_master_client.h"
#include "client/subprocess.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "job/job_spec.h"
#include "tests/elastic_fixture.h"
#include "tests/test_checkpoints.h"
#include "tests/test_cluster.h"

namespace weft {
namespace {

using testing::ReadNewestCheckpoint;
using testing::ReadText;
using testing::SavedCheckpoint;
using testing::StepCounters;

constexpr int kSteps = 300;  // 4.8 epochs of the 6000 examples
const char* const kVictim = "/job:worker/task:2";

JobSpec ElasticJob(const std::string& checkpoint_dir, int steps = kSteps) {
  return testing::ElasticJobSpec("elastic-job", "kind: MULTI_WORKER_MIRRORED steps_per_execution: 1", steps,
                                 checkpoint_dir);
}

// The final checkpoint under `dir` holds one shard per worker of `workers`,
// each of which applied every one of the job's `steps` steps exactly once,
// and all hold the same variables, bit for bit.
void ExpectEveryWorkerAppliedEveryStepOnce(const std::string& dir, int steps, size_t workers) {
  absl::StatusOr<SavedCheckpoint> saved = ReadNewestCheckpoint(dir);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->step, steps);
  const std::map<std::string, int64_t> counters = StepCounters(*saved);
  ASSERT_EQ(counters.size(), workers) << saved->path;
  for (const auto& [task, count] : counters) EXPECT_EQ(count, steps) << task;
  std::map<std::string, std::map<std::string, std::string>> by_task;
  for (const auto& [key, v] : saved->variables) {
    const size_t bar = key.find('|');
    by_task[key.substr(0, bar)][key.substr(bar + 1)] = v.bytes;
  }
  ASSERT_EQ(by_task.size(), workers);
  for (const auto& [task, variables] : by_task) {
    EXPECT_TRUE(variables == by_task.begin()->second) << task << " and " << by_task.begin()->first << " differ";
  }
}

class ElasticTest : public testing::ElasticFixture {
 protected:
  // Kills worker 2 for good, then submits a `steps`-step job that checkpoints
  // into `dir`: its id once it trains on the other two.
  absl::StatusOr<std::string> RunOnTwo(const std::string& dir, int steps) {
    Subprocess* gone = daemons_.at("worker-2")->process();
    gone->Signal(SIGKILL);
    if (!gone->WaitFor(absl::Seconds(10))) return absl::DeadlineExceededError("worker-2 outlived SIGKILL");
    ASSIGN_OR_RETURN(std::string id, client_->SubmitJob(ElasticJob(dir, steps)));
    const JobStatus two = PollUntil(id, "a step on two workers",
                                    [](const JobStatus& s) { return s.state() == RUNNING && s.step() > 0; });
    if (two.state() != RUNNING || two.workers_size() != 2) {
      return absl::FailedPreconditionError(absl::StrCat("not running on two workers: ", two.DebugString()));
    }
    return id;
  }

  // Once the job trains on three workers, follows it to the end: it
  // succeeds without a restart or a restore, after one change, which took
  // `joiner` in, and every worker applied every step once. `end` and
  // `change` are the job's last status and that change.
  void ExpectJoinedToTheEnd(const std::string& id, const std::string& dir, int steps, const std::string& joiner,
                            JobStatus* end, MembershipChange* change) {
    const JobStatus three = PollUntil(id, "three workers", [](const JobStatus& s) { return s.workers_size() == 3; });
    ASSERT_EQ(three.state(), RUNNING) << "the job ended before the worker could join: " << three.DebugString();
    *end = WatchToEnd(id);
    ASSERT_EQ(end->state(), SUCCEEDED) << end->DebugString();
    EXPECT_EQ(end->restarts(), 0) << "a join is no failure: " << end->DebugString();
    ASSERT_EQ(end->membership_change_size(), 1) << end->DebugString();
    *change = end->membership_change(0);
    ASSERT_EQ(change->joined_size(), 1) << change->DebugString();
    EXPECT_EQ(change->joined(0), joiner);
    EXPECT_EQ(change->workers(), 3);
    EXPECT_TRUE(MasterLogLines("restored ").empty()) << ReadText(LogPath("master"));
    ExpectEveryWorkerAppliedEveryStepOnce(dir, steps, 3);
  }

};

TEST_F(ElasticTest, AWorkerLostForGoodLeavesTheJobToTheOthersWithoutARestoreOrARepeatedStep) {
  // Undisturbed first, on all three.
  const std::string undisturbed_dir = Path("undisturbed-ckpt");
  auto first = client_->SubmitJob(ElasticJob(undisturbed_dir));
  ASSERT_TRUE(first.ok()) << first.status();
  const JobStatus undisturbed = WatchToEnd(*first);
  ASSERT_EQ(undisturbed.state(), SUCCEEDED) << undisturbed.DebugString();
  EXPECT_EQ(undisturbed.membership_change_size(), 0) << undisturbed.DebugString();
  EXPECT_EQ(undisturbed.workers_size(), 3) << undisturbed.DebugString();

  const int target = std::uniform_int_distribution<int>(kSteps / 10, kSteps / 3)(rng_);
  const std::string dir = Path("elastic-ckpt");
  auto id = client_->SubmitJob(ElasticJob(dir));
  ASSERT_TRUE(id.ok()) << id.status();
  const JobStatus before =
      PollUntil(*id, absl::StrCat("step ", target), [&](const JobStatus& s) { return s.step() >= target; });
  ASSERT_EQ(before.state(), RUNNING) << before.DebugString();
  Subprocess* victim = daemons_.at("worker-2")->process();
  victim->Signal(SIGKILL);
  ASSERT_TRUE(victim->WaitFor(absl::Seconds(10)));
  const JobStatus st = WatchToEnd(*id);

  ASSERT_EQ(st.state(), SUCCEEDED) << st.DebugString();
  EXPECT_EQ(st.step(), kSteps);
  EXPECT_EQ(st.steps_lost(), 0) << st.DebugString();
  // The membership change, recorded.
  ASSERT_EQ(st.membership_change_size(), 1) << st.DebugString();
  const MembershipChange& change = st.membership_change(0);
  ASSERT_EQ(change.left_size(), 1) << st.DebugString();
  EXPECT_EQ(change.left(0), kVictim);
  EXPECT_EQ(change.joined_size(), 0);
  EXPECT_EQ(change.workers(), 2);
  EXPECT_GE(change.step(), before.step()) << "went on from before the step the job had reached";
  EXPECT_GT(change.seconds(), 0);
  EXPECT_TRUE(absl::StrContains(change.reason(), kVictim)) << change.reason();
  EXPECT_EQ(st.workers_size(), 2) << st.DebugString();
  EXPECT_EQ(MasterLogLines("membership changed in").size(), 1u) << ReadText(LogPath("master"));
  // No checkpoint restored ("restored N variable(s) of step S from ...").
  EXPECT_TRUE(MasterLogLines("restored ").empty()) << ReadText(LogPath("master"));

  // Every step applied exactly once on each survivor, and their variables equal.
  ExpectEveryWorkerAppliedEveryStepOnce(dir, kSteps, 2);

  EXPECT_LE(std::fabs(st.test_accuracy() - undisturbed.test_accuracy()), 0.005)
      << st.test_accuracy() << " vs undisturbed " << undisturbed.test_accuracy();
  std::printf("[elastic] killed worker-2 at step >= %lld; went on from step %lld with %d workers in %.2f s; "
              "test accuracy %.4f (undisturbed %.4f)\n",
              static_cast<long long>(before.step()), static_cast<long long>(change.step()), change.workers(),
              change.seconds(), st.test_accuracy(), undisturbed.test_accuracy());
}

// Every worker restarts and one of them stays away: nothing in memory, so
// the job restores its newest checkpoint, written by three workers, onto
// the two that answer (each from its own shard), rather than waiting for
// the third.
TEST_F(ElasticTest, ACheckpointOfThreeWorkersIsRestoredOntoTheTwoThatCameBack) {
  const std::string dir = Path("restore-ckpt");
  JobSpec job = ElasticJob(dir);
  job.mutable_checkpoint()->set_every_steps(40);
  job.mutable_elastic()->set_wait_seconds(10);  // long enough for workers 0 and 1 to come back
  auto id = client_->SubmitJob(job);
  ASSERT_TRUE(id.ok()) << id.status();
  const JobStatus before = PollUntil(*id, "a checkpoint", [](const JobStatus& s) { return s.checkpoint_step() > 0; });
  ASSERT_EQ(before.state(), RUNNING) << before.DebugString();
  ASSERT_EQ(before.workers_size(), 3) << before.DebugString();
  for (int i = 0; i < 3; ++i) {
    Subprocess* p = daemons_.at(absl::StrCat("worker-", i))->process();
    p->Signal(SIGKILL);
    ASSERT_TRUE(p->WaitFor(absl::Seconds(10)));
  }
  for (int i = 0; i < 2; ++i) {
    absl::Status s = daemons_.at(absl::StrCat("worker-", i))->Restart();
    ASSERT_TRUE(s.ok()) << s;
  }
  const JobStatus st = WatchToEnd(*id);

  ASSERT_EQ(st.state(), SUCCEEDED) << st.DebugString();
  EXPECT_EQ(st.step(), kSteps);
  EXPECT_EQ(st.restarts(), 1) << st.DebugString();
  EXPECT_EQ(st.workers_size(), 2) << st.DebugString();
  // The history has the change too: worker-2 left, from the restored step.
  ASSERT_EQ(st.membership_change_size(), 1) << st.DebugString();
  const MembershipChange& change = st.membership_change(0);
  EXPECT_EQ(std::vector<std::string>(change.left().begin(), change.left().end()),
            std::vector<std::string>{kVictim});
  EXPECT_EQ(change.joined_size(), 0) << change.DebugString();
  EXPECT_EQ(change.workers(), 2);
  EXPECT_GE(change.step(), before.checkpoint_step()) << change.DebugString();
  EXPECT_TRUE(absl::StrContains(change.reason(), "the variables were gone with every worker")) << change.reason();
  EXPECT_EQ(MasterLogLines("no checkpoint restored").size(), 0u) << ReadText(LogPath("master"));
  const std::vector<std::string> restored = MasterLogLines("restored ");
  ASSERT_EQ(restored.size(), 1u) << ReadText(LogPath("master"));
  // Both survivors applied every step once from the restored counters, and agree bit for bit.
  ExpectEveryWorkerAppliedEveryStepOnce(dir, kSteps, 2);
  std::printf("[elastic] all workers killed at step >= %lld, checkpoint of step %lld restored onto 2; test "
              "accuracy %.4f\n",
              static_cast<long long>(before.step()), static_cast<long long>(before.checkpoint_step()),
              st.test_accuracy());
}

// A worker that was down when the job started joins it once it answers, at
// a step boundary: it takes the variables from a peer, and from then on the
// three train in lockstep.
TEST_F(ElasticTest, AWorkerThatStartsLaterJoinsTheRunningJobWithAPeersVariables) {
  constexpr int kLongSteps = 3000;
  const std::string dir = Path("join-ckpt");
  absl::StatusOr<std::string> id = RunOnTwo(dir, kLongSteps);
  ASSERT_TRUE(id.ok()) << id.status();
  absl::Status restarted = daemons_.at("worker-2")->Restart();
  ASSERT_TRUE(restarted.ok()) << restarted;
  JobStatus st;
  MembershipChange change;
  ASSERT_NO_FATAL_FAILURE(ExpectJoinedToTheEnd(*id, dir, kLongSteps, kVictim, &st, &change));
  EXPECT_EQ(st.step(), kLongSteps);
  EXPECT_EQ(change.left_size(), 0);
  EXPECT_TRUE(absl::StrContains(change.reason(), "may join")) << change.reason();
  std::printf("[elastic] worker-2 joined at step %lld in %.2f s; test accuracy %.4f\n",
              static_cast<long long>(change.step()), change.seconds(), st.test_accuracy());
}

// A worker the master was never told of (`weft worker --master`, as a
// Kubernetes scale-up starts one) registers itself and joins the running
// job at a step boundary, taking a peer's variables.
TEST_F(ElasticTest, AWorkerOutsideTheMastersClusterRegistersAndJoinsTheRunningJob) {
  constexpr int kLongSteps = 3000;
  constexpr char kNewcomer[] = "/job:worker/task:3";
  const std::string dir = Path("register-ckpt");
  absl::StatusOr<std::string> id = RunOnTwo(dir, kLongSteps);
  ASSERT_TRUE(id.ok()) << id.status();
  testing::TestDaemon* newcomer =
      Add("worker-3", {"worker", "--task=worker:3", "--master=" + daemons_.at("master")->address(),
                       "--checkpoint_root=" + ::testing::TempDir()});
  absl::Status started = newcomer->Start();
  ASSERT_TRUE(started.ok()) << started;
  JobStatus st;
  MembershipChange change;
  ASSERT_NO_FATAL_FAILURE(ExpectJoinedToTheEnd(*id, dir, kLongSteps, kNewcomer, &st, &change));
  const std::vector<std::string> joined = MasterLogLines("task /job:worker/task:3 joined the cluster at 127.0.0.1:");
  EXPECT_EQ(joined.size(), 1u) << "said once, however often the worker says it is there: "
                               << ReadText(LogPath("master"));
  std::printf("[elastic] worker 3 registered and joined at step %lld in %.2f s; test accuracy %.4f\n",
              static_cast<long long>(change.step()), change.seconds(), st.test_accuracy());
}

// `weft scale`: a size outside elastic's bounds is refused; 2 makes the job
// leave worker 2 standing by at a step boundary, 3 takes it back.
TEST_F(ElasticTest, ScaleShrinksAndGrowsARunningJobWithinItsBounds) {
  constexpr int kLongSteps = 3000;
  const std::string dir = Path("scale-ckpt");
  auto id = client_->SubmitJob(ElasticJob(dir, kLongSteps));
  ASSERT_TRUE(id.ok()) << id.status();
  const JobStatus running = PollUntil(*id, "a step", [](const JobStatus& s) { return s.step() > 0; });
  ASSERT_EQ(running.state(), RUNNING) << running.DebugString();
  absl::Status s = client_->ScaleJob(*id, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "4 workers is outside elastic.min_workers 2 to max_workers 3")) << s;
  EXPECT_EQ(client_->ScaleJob(*id, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->ScaleJob("job-0-0000000000000000", 2).code(), absl::StatusCode::kNotFound);

  ASSERT_TRUE(client_->ScaleJob(*id, 2).ok());
  const JobStatus two = PollUntil(*id, "two workers", [](const JobStatus& s) { return s.workers_size() == 2; });
  ASSERT_EQ(two.state(), RUNNING) << two.DebugString();
  ASSERT_TRUE(client_->ScaleJob(*id, 3).ok());
  const JobStatus three = PollUntil(*id, "three workers again",
                                    [](const JobStatus& s) { return s.membership_change_size() == 2; });
  ASSERT_EQ(three.state(), RUNNING) << three.DebugString();
  const JobStatus st = WatchToEnd(*id);

  ASSERT_EQ(st.state(), SUCCEEDED) << st.DebugString();
  EXPECT_EQ(st.restarts(), 0) << st.DebugString();
  ASSERT_EQ(st.membership_change_size(), 2) << st.DebugString();
  EXPECT_EQ(st.membership_change(0).workers(), 2);
  ASSERT_EQ(st.membership_change(0).left_size(), 1);
  EXPECT_EQ(st.membership_change(0).left(0), kVictim);
  EXPECT_TRUE(absl::StrContains(st.membership_change(0).reason(), "weft scale asked for 2"))
      << st.membership_change(0).reason();
  EXPECT_EQ(st.membership_change(1).workers(), 3);
  ASSERT_EQ(st.membership_change(1).joined_size(), 1);
  EXPECT_EQ(st.membership_change(1).joined(0), kVictim);
  EXPECT_LE(st.membership_change(0).step(), st.membership_change(1).step());
  EXPECT_TRUE(MasterLogLines("restored ").empty()) << ReadText(LogPath("master"));
  ExpectEveryWorkerAppliedEveryStepOnce(dir, kLongSteps, 3);
}

}  // namespace
}  // namespace weft
