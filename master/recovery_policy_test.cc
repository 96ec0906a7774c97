// The recovery decisions of a distributed job (master/recovery_policy.h).
#include "master/recovery_policy.h"

#include <stdlib.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "master/fake_worker.h"
#include "master/worker_cache.h"

namespace weft {
namespace master {
namespace {

constexpr char kPs[] = "/job:ps/task:0";
constexpr char kW0[] = "/job:worker/task:0";
constexpr char kW1[] = "/job:worker/task:1";

JobSpec Job(const std::string& text) {
  JobSpec job;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &job)) << text;
  return job;
}

// ---- Recovery settings and decisions ----

// The recovery defaults are tested with the rest of the defaults, in
// job/defaults_test.cc.

ps::CheckpointEntry Entry(int64_t step) {
  ps::CheckpointEntry e;
  e.path = absl::StrCat("/ck/step-", step);
  e.step = step;
  e.valid = true;
  return e;
}

TEST(ChooseResumePointTest, TheCheckpointFoundOrStepZero) {
  const JobSpec job = Job("name: 'j' checkpoint { dir: '/ck' }");
  auto r = ChooseResumePoint(job, Entry(40), /*at_start=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->step, 40);

  r = ChooseResumePoint(job, absl::NotFoundError("no valid checkpoint under /ck"), /*at_start=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->has_value());

  // A directory the job may not read, or cannot, is not "no checkpoint".
  r = ChooseResumePoint(job, absl::PermissionDeniedError("checkpoint directory /ck belongs to user alice"), true);
  EXPECT_EQ(r.status(), absl::PermissionDeniedError("checkpoint directory /ck belongs to user alice"));
  r = ChooseResumePoint(job, absl::DataLossError("manifest"), false);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
}

TEST(ChooseResumePointTest, AResumeFromWithoutACheckpointFailsOnlyAtTheStart) {
  const JobSpec job = Job("name: 'j' checkpoint { dir: '/ck' resume_from: '/old' }");
  auto r = ChooseResumePoint(job, absl::NotFoundError("no valid checkpoint under /old"), /*at_start=*/true);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_EQ(r.status().message(),
            "job 'j': resume_from /old holds no valid checkpoint: no valid checkpoint under /old");
  // A recovery before the first checkpoint starts over.
  r = ChooseResumePoint(job, absl::NotFoundError("no valid checkpoint under /ck"), /*at_start=*/false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->has_value());
}

TaskHealth Answered(const std::string& task, uint64_t incarnation) {
  TaskHealth h;
  h.task = task;
  h.answered = true;
  h.incarnation = incarnation;
  return h;
}

TaskHealth Unanswered(const std::string& task, const std::string& why) {
  TaskHealth h;
  h.task = task;
  h.error = absl::UnavailableError(why);
  return h;
}

TEST(BlameTaskTest, ADrainedTaskComesFirst) {
  const std::vector<TaskHealth> probe = {Answered(kPs, 9), Answered(kW0, 2)};
  std::optional<TaskFailure> f = BlameTask(kW0, {{kPs, 1}, {kW0, 2}}, probe, TaskFailure{kPs, "unreachable: x"});
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->task, kW0);
  EXPECT_EQ(f->reason, "is stopping after SIGTERM (checkpointed first)");
}

TEST(BlameTaskTest, TheFirstFailedTaskOfTheProbe) {
  const std::map<std::string, uint64_t> known = {{kPs, 1}, {kW0, 2}, {kW1, 3}};
  const std::vector<TaskHealth> probe = {Answered(kPs, 1), Unanswered(kW0, "connection refused"), Answered(kW1, 4)};
  std::optional<TaskFailure> f = BlameTask("", known, probe, std::nullopt);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->task, kW0);
  EXPECT_EQ(f->reason, "unreachable: connection refused");

  // Back by now under a new incarnation: a restart.
  f = BlameTask("", known, {Answered(kPs, 1), Answered(kW0, 2), Answered(kW1, 4)}, std::nullopt);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->task, kW1);
  EXPECT_EQ(f->reason, "restarted (incarnation 3 -> 4), losing its state");
}

TEST(BlameTaskTest, WithoutASessionAnyUnansweredTaskIsToBlame) {
  // The attempt failed before it knew any incarnation.
  std::optional<TaskFailure> f =
      BlameTask("", {}, {Answered(kPs, 1), Unanswered(kW0, "connection refused")}, std::nullopt);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->task, kW0);
  EXPECT_EQ(f->reason, "unreachable: connection refused");
  EXPECT_FALSE(BlameTask("", {}, {Answered(kPs, 1), Answered(kW0, 2)}, std::nullopt).has_value());
}

TEST(BlameTaskTest, TheHeartbeatsFailureWhenEveryTaskLooksWellNow) {
  const std::map<std::string, uint64_t> known = {{kPs, 1}, {kW0, 2}};
  const std::vector<TaskHealth> probe = {Answered(kPs, 1), Answered(kW0, 2)};
  // A task that stopped answering for a while and came back.
  std::optional<TaskFailure> f =
      BlameTask("", known, probe, TaskFailure{kW0, "unreachable: no answer to GetStatus within 5s"});
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->task, kW0);
  // Nobody failed: the error is the job's own.
  EXPECT_FALSE(BlameTask("", known, probe, std::nullopt).has_value());
}

TEST(CheckRestartBudgetTest, TheBudgetEndsTheJobNamingTaskAndError) {
  const TaskFailure f{kW0, "unreachable: connection refused"};
  const absl::Status error = absl::UnavailableError("task /job:worker/task:0: connection refused");
  EXPECT_TRUE(CheckRestartBudget(f, 0, 2, error).ok());
  EXPECT_TRUE(CheckRestartBudget(f, 1, 2, error).ok());
  absl::Status s = CheckRestartBudget(f, 2, 2, error);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(),
            "task /job:worker/task:0 unreachable: connection refused; the job gave up after 2 recoveries "
            "(recovery.max_restarts): task /job:worker/task:0: connection refused");
  // max_restarts -1: the first failure ends the job.
  EXPECT_EQ(CheckRestartBudget(f, 0, EffectiveRecovery(Job("recovery { max_restarts: -1 }").recovery()).max_restarts,
                               error)
                .code(),
            absl::StatusCode::kUnavailable);
}

TEST(ClassifyReplicaFailureTest, WhoseFailureDecidesWhatTheReplicaDoes) {
  const std::set<std::string> ps = {kPs};
  const absl::Status unavailable = absl::UnavailableError("task /job:worker/task:1 restarted");
  const TaskFailure w0_lost{kW0, "unreachable: connection refused"};
  const TaskFailure w1_lost{kW1, "restarted (incarnation 1 -> 2), losing its state"};
  const TaskFailure ps_lost{kPs, "unreachable: connection refused"};

  EXPECT_EQ(ClassifyReplicaFailure(unavailable, kW0, {w0_lost}, ps, std::nullopt), ReplicaFailure::kAwaitOwnWorker);
  EXPECT_EQ(ClassifyReplicaFailure(unavailable, kW0, {w1_lost}, ps, std::nullopt), ReplicaFailure::kGoOn);
  EXPECT_EQ(ClassifyReplicaFailure(unavailable, kW0, {w1_lost, w0_lost}, ps, std::nullopt),
            ReplicaFailure::kAwaitOwnWorker);
  // A lost ps ends the attempt whoever else failed.
  EXPECT_EQ(ClassifyReplicaFailure(unavailable, kW0, {w0_lost, ps_lost}, ps, std::nullopt), ReplicaFailure::kEndJob);
  // Nothing failed now: the heartbeat's abort for a worker that is back is
  // no reason to stop; the job's own error, or a ps's, is.
  EXPECT_EQ(ClassifyReplicaFailure(unavailable, kW0, {}, ps, w1_lost), ReplicaFailure::kGoOn);
  EXPECT_EQ(ClassifyReplicaFailure(unavailable, kW0, {}, ps, ps_lost), ReplicaFailure::kEndJob);
  EXPECT_EQ(ClassifyReplicaFailure(unavailable, kW0, {}, ps, std::nullopt), ReplicaFailure::kEndJob);
  EXPECT_EQ(ClassifyReplicaFailure(absl::InvalidArgumentError("node 'x' (MatMul): shapes"), kW0, {}, ps, w1_lost),
            ReplicaFailure::kEndJob);
}

// ---- The resume search of a start and of a recovery ----

class FindResumePointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = JoinPath(::testing::TempDir(), "recovery_policy_test.XXXXXX");
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    auto cache = WorkerCache::CreateLocal(
        {kPs}, [](const std::string& task, const std::string&) { return std::make_unique<FakeWorker>(task); });
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = *std::move(cache);
  }

  std::unique_ptr<Checkpointer> Make(const JobSpec& job) {
    auto ck = Checkpointer::Create(Env::Default(), cache_.get(), job.name(), job.checkpoint());
    EXPECT_TRUE(ck.ok()) << ck.status();
    return ck.ok() ? *std::move(ck) : nullptr;
  }

  std::string dir_;
  std::unique_ptr<WorkerCache> cache_;
};

TEST_F(FindResumePointTest, AJobWithoutCheckpointsStartsAtStepZeroWithoutLooking) {
  // resume_from alone keeps no checkpoints: nothing is searched, not even
  // at the start.
  const JobSpec job = Job(absl::StrCat("name: 'j' checkpoint { resume_from: '", dir_, "/none' }"));
  std::unique_ptr<Checkpointer> ck = Make(job);
  ASSERT_NE(ck, nullptr);
  ASSERT_FALSE(ck->enabled());
  auto r = FindResumePoint(job, ck.get(), /*at_start=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->has_value());
}

TEST_F(FindResumePointTest, AnEmptyDirectoryFailsAResumeFromAtTheStartOnly) {
  const JobSpec job = Job(absl::StrCat("name: 'j' checkpoint { dir: '", dir_, "/ck' resume_from: '", dir_, "/old' }"));
  std::unique_ptr<Checkpointer> ck = Make(job);
  ASSERT_NE(ck, nullptr);
  ASSERT_TRUE(ck->enabled());
  auto r = FindResumePoint(job, ck.get(), /*at_start=*/true);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find(absl::StrCat("resume_from ", dir_, "/old")), absl::string_view::npos)
      << r.status();
  r = FindResumePoint(job, ck.get(), /*at_start=*/false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->has_value());
}

}  // namespace
}  // namespace master
}  // namespace weft
