// Elastic PARAMETER_SERVER jobs with real processes (tests/elastic_fixture.h:
// a master, three workers and a ps over mTLS, on a slice of Fashion-MNIST),
// sync and async. The variables live on the ps; a worker may leave and come
// back (docs/fault_tolerance.md, "Elastic jobs"). What must hold:
//   - a worker killed for good mid-job leaves the job to the other two,
//     with no checkpoint restored and no step lost; async, the other two
//     train on while it has its elastic.wait_seconds to come back;
//   - the same worker, started again, joins the running job at a step
//     boundary, and it ends on three;
//   - no step is applied twice or skipped: the ps's step counter, saved in
//     the final checkpoint, is exactly the job's step count (sync: each
//     global step is applied whole or not at all; async: each replica's
//     step is);
//   - the job's status records both changes, and it learns the task.
//
// The kill lands at a step drawn from the run's seed (WEFT_TEST_SEED=n
// replays it), printed with the figures:
//   [elastic-ps] sync: worker-2 killed at step >= X, left at Y in Z s, joined at W in V s; accuracy A
#include <signal.h>

#include <cstdio>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/subprocess.h"
#include "gtest/gtest.h"
#include "job/job_spec.h"
#include "tests/elastic_fixture.h"
#include "tests/test_checkpoints.h"

namespace weft {
namespace {

// Sync: 24 epochs of the 6000 examples. Async, where the other replicas
// train on through the lost worker's wait, more: the job must still run
// when it comes back.
int Steps(bool sync) { return sync ? 1500 : 4000; }
const char* const kVictim = "/job:worker/task:2";

JobSpec ElasticPsJob(const std::string& checkpoint_dir, bool sync, int steps) {
  return testing::ElasticJobSpec("elastic-ps-job",
                                 absl::StrCat("kind: PARAMETER_SERVER sync: ", sync ? "true" : "false",
                                              " steps_per_execution: 1"),
                                 steps, checkpoint_dir);
}

class ElasticPsTest : public testing::ElasticFixture, public ::testing::WithParamInterface<bool> {
 protected:
  ElasticPsTest() : ElasticFixture(/*with_ps=*/true) {}
};

TEST_P(ElasticPsTest, AWorkerLeavesAndComesBackWhileThePsKeepsTheVariables) {
  const bool sync = GetParam();
  const int steps = Steps(sync);
  const std::string dir = Path("ckpt");
  auto id = client_->SubmitJob(ElasticPsJob(dir, sync, steps));
  ASSERT_TRUE(id.ok()) << id.status();
  const int target = std::uniform_int_distribution<int>(steps / 30, steps / 10)(rng_);
  const JobStatus before =
      PollUntil(*id, absl::StrCat("step ", target), [&](const JobStatus& s) { return s.step() >= target; });
  ASSERT_EQ(before.state(), RUNNING) << before.DebugString();
  ASSERT_EQ(before.workers_size(), 3) << before.DebugString();
  testing::TestDaemon* victim = daemons_.at("worker-2").get();
  victim->process()->Signal(SIGKILL);
  ASSERT_TRUE(victim->process()->WaitFor(absl::Seconds(10)));
  const JobStatus two = PollUntil(*id, "the job on two workers", [](const JobStatus& s) {
    return s.membership_change_size() == 1 && s.state() == RUNNING;
  });
  ASSERT_EQ(two.state(), RUNNING) << "the job ended before the worker could come back: " << two.DebugString();
  EXPECT_EQ(two.workers_size(), 2) << two.DebugString();
  absl::Status restarted = victim->Restart();
  ASSERT_TRUE(restarted.ok()) << restarted;
  const JobStatus st = WatchToEnd(*id);

  ASSERT_EQ(st.state(), SUCCEEDED) << st.DebugString();
  EXPECT_EQ(st.step(), steps);
  EXPECT_EQ(st.steps_lost(), 0) << st.DebugString();
  EXPECT_EQ(st.restarts(), 1) << "the kill, and no other failure: " << st.DebugString();
  ASSERT_EQ(st.membership_change_size(), 2) << "left, then joined: " << st.DebugString();
  const MembershipChange& left = st.membership_change(0);
  const MembershipChange& joined = st.membership_change(1);
  ASSERT_EQ(left.left_size(), 1) << left.DebugString();
  EXPECT_EQ(left.left(0), kVictim);
  EXPECT_EQ(left.workers(), 2);
  EXPECT_GE(left.step(), before.step()) << "went on from before the step the job had reached";
  EXPECT_TRUE(absl::StrContains(left.reason(), kVictim)) << left.reason();
  if (!sync) {
    // Async replicas wait for nobody: during worker-2's second the others
    // kept stepping, and its replica alone waited.
    EXPECT_TRUE(absl::StrContains(left.reason(), "in which the other replicas trained")) << left.reason();
    EXPECT_FALSE(absl::StrContains(left.reason(), "trained 0 step(s)")) << left.reason();
  }
  ASSERT_EQ(joined.joined_size(), 1) << joined.DebugString();
  EXPECT_EQ(joined.joined(0), kVictim);
  EXPECT_EQ(joined.workers(), 3);
  EXPECT_LE(left.step(), joined.step());
  EXPECT_EQ(st.workers_size(), 3) << st.DebugString();
  EXPECT_EQ(MasterLogLines("membership changed in").size(), 2u) << testing::ReadText(LogPath("master"));
  EXPECT_TRUE(MasterLogLines("restored ").empty()) << testing::ReadText(LogPath("master"));

  // Every step applied once: the ps's counter, and only the ps holds state.
  absl::StatusOr<testing::SavedCheckpoint> saved = testing::ReadNewestCheckpoint(dir);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->step, steps);
  const std::map<std::string, int64_t> counters = testing::StepCounters(*saved);
  EXPECT_EQ(counters, (std::map<std::string, int64_t>{{"/job:ps/task:0", steps}})) << saved->path;
  for (const auto& [key, v] : saved->variables) {
    EXPECT_TRUE(absl::StartsWith(key, "/job:ps/task:0|")) << key << ": a worker holds no variable";
  }
  EXPECT_GT(st.test_accuracy(), 0.8) << "it learned (about 0.85 undisturbed)";
  std::printf("[elastic-ps] %s: worker-2 killed at step >= %lld, left at %lld in %.2f s, joined at %lld in %.2f s; "
              "test accuracy %.4f\n",
              sync ? "sync" : "async", static_cast<long long>(before.step()), static_cast<long long>(left.step()),
              left.seconds(), static_cast<long long>(joined.step()), joined.seconds(), st.test_accuracy());
}

INSTANTIATE_TEST_SUITE_P(SyncAndAsync, ElasticPsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "Sync" : "Async"; });

}  // namespace
}  // namespace weft
