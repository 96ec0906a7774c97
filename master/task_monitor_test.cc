// The task monitor against scripted tasks: what a probe reports for tasks
// that answer, fail, drain or never answer; how failures are judged; the
// waits of recovery; and the heartbeat's reports.
#include "master/task_monitor.h"

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "master/fake_worker.h"
#include "master/worker_cache.h"

namespace weft {
namespace master {
namespace {

constexpr char kT0[] = "/job:worker/task:0";
constexpr char kT1[] = "/job:worker/task:1";
constexpr char kT2[] = "/job:ps/task:0";
constexpr char kT3[] = "/job:ps/task:1";
constexpr absl::Duration kWait = absl::Seconds(30);  // for things that happen at once

// How a task answers one GetStatus.
struct Reply {
  enum Kind { kAnswer, kFail, kHold } kind = kAnswer;
  uint64_t incarnation = 0;
  bool draining = false;
  absl::Status error;

  static Reply Answer(uint64_t incarnation, bool draining = false) { return {kAnswer, incarnation, draining, {}}; }
  static Reply Fail(absl::Status error) { return {kFail, 0, false, std::move(error)}; }
  static Reply Hold() { return {kHold, 0, false, {}}; }
};

// A task whose GetStatus answers as scripted: the queued replies first, one
// per call, then the standing one. A held call completes only at Release.
class ScriptedTask final : public FakeWorker {
 public:
  explicit ScriptedTask(std::string task) : FakeWorker(std::move(task)) {}

  void Set(Reply standing) {
    absl::MutexLock lock(&mu_);
    standing_ = std::move(standing);
  }
  void Queue(Reply once) {
    absl::MutexLock lock(&mu_);
    queued_.push_back(std::move(once));
  }
  // Answers every held call with `reply`.
  void Release(const Reply& reply) {
    std::vector<std::pair<GetStatusResponse*, StatusCallback>> held;
    {
      absl::MutexLock lock(&mu_);
      held.swap(held_);
    }
    for (auto& [response, done] : held) Complete(reply, response, done);
  }
  int calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  // True once at least `n` GetStatus calls have arrived.
  bool AwaitCalls(int n, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

  void GetStatusAsync(const GetStatusRequest*, GetStatusResponse* response, StatusCallback done) override {
    Reply reply;
    {
      absl::MutexLock lock(&mu_);
      ++calls_;
      if (!queued_.empty()) {
        reply = std::move(queued_.front());
        queued_.pop_front();
      } else {
        reply = standing_;
      }
      if (reply.kind == Reply::kHold) {
        held_.emplace_back(response, std::move(done));
        return;
      }
    }
    Complete(reply, response, done);
  }

 private:
  void Complete(const Reply& reply, GetStatusResponse* response, const StatusCallback& done) {
    if (reply.kind == Reply::kFail) return done(reply.error);
    response->set_task(task());
    response->set_incarnation(reply.incarnation);
    response->set_draining(reply.draining);
    done(absl::OkStatus());
  }

  mutable absl::Mutex mu_;
  Reply standing_ ABSL_GUARDED_BY(mu_) = Reply::Answer(1);
  std::deque<Reply> queued_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<GetStatusResponse*, StatusCallback>> held_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

struct ScriptedCluster {
  explicit ScriptedCluster(const std::vector<std::string>& names) {
    cache = *WorkerCache::CreateLocal(names, [this](const std::string& task, const std::string&) {
      auto t = std::make_unique<ScriptedTask>(task);
      tasks[task] = t.get();
      return t;
    });
    for (const std::string& n : names) cache->GetOrCreateWorker(n);
  }
  ScriptedTask& operator[](const std::string& task) { return *tasks.at(task); }

  std::map<std::string, ScriptedTask*> tasks;  // owned by the cache
  std::unique_ptr<WorkerCache> cache;
};

TEST(ProbeTasksTest, ReportsEveryTaskInListOrder) {
  ScriptedCluster c({kT0, kT1, kT2, kT3});
  c[kT0].Set(Reply::Answer(0x11));
  c[kT1].Set(Reply::Answer(0x22, /*draining=*/true));
  c[kT2].Set(Reply::Fail(absl::UnavailableError("connection refused")));
  c[kT3].Set(Reply::Hold());

  std::vector<TaskHealth> probe = ProbeTasks(c.cache.get(), absl::Milliseconds(20));
  ASSERT_EQ(probe.size(), 4u);
  EXPECT_EQ(probe[0].task, kT0);
  EXPECT_TRUE(probe[0].answered);
  EXPECT_EQ(probe[0].incarnation, 0x11u);
  EXPECT_FALSE(probe[0].draining);
  EXPECT_TRUE(probe[0].error.ok());

  EXPECT_EQ(probe[1].task, kT1);
  EXPECT_TRUE(probe[1].answered);
  EXPECT_EQ(probe[1].incarnation, 0x22u);
  EXPECT_TRUE(probe[1].draining);

  EXPECT_EQ(probe[2].task, kT2);
  EXPECT_FALSE(probe[2].answered);
  EXPECT_EQ(probe[2].error, absl::UnavailableError("connection refused"));

  EXPECT_EQ(probe[3].task, kT3);
  EXPECT_FALSE(probe[3].answered);
  EXPECT_EQ(probe[3].error.code(), absl::StatusCode::kDeadlineExceeded) << probe[3].error;
  EXPECT_EQ(probe[3].error.message(), "task /job:ps/task:1: no answer to GetStatus within 20ms");

  // The late answer lands in the probe's own state, which outlives the call;
  // what was returned does not change.
  c[kT3].Release(Reply::Answer(0x33));
  EXPECT_FALSE(probe[3].answered);
}

TEST(ProbeTasksTest, ReturnsOnceEveryTaskHasAnswered) {
  ScriptedCluster c({kT0, kT1});
  const absl::Time start = absl::Now();
  std::vector<TaskHealth> probe = ProbeTasks(c.cache.get(), absl::Minutes(10));
  // Waiting out the timeout would take ten minutes.
  EXPECT_LT(absl::Now() - start, absl::Minutes(5));
  ASSERT_EQ(probe.size(), 2u);
  EXPECT_TRUE(probe[0].answered);
  EXPECT_TRUE(probe[1].answered);
}

TaskHealth Answered(const std::string& task, uint64_t incarnation) {
  TaskHealth h;
  h.task = task;
  h.answered = true;
  h.incarnation = incarnation;
  return h;
}

TEST(FailedTasksTest, UnreachableAndRestartedTasksAmongTheKnownOnes) {
  TaskHealth unreachable;
  unreachable.task = kT1;
  unreachable.error = absl::UnavailableError("connection refused");
  TaskHealth stranger = Answered(kT3, 0x99);
  stranger.draining = true;
  const std::vector<TaskHealth> probe = {Answered(kT0, 0x1f), unreachable, Answered(kT2, 0x9a), stranger};
  const std::map<std::string, uint64_t> known = {{kT0, 0x1f}, {kT1, 0x2}, {kT2, 0x1f}};

  std::vector<TaskFailure> failed = FailedTasks(probe, known);
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_EQ(failed[0].task, kT1);
  EXPECT_EQ(failed[0].reason, "unreachable: connection refused");
  EXPECT_EQ(failed[1].task, kT2);
  EXPECT_EQ(failed[1].reason, "restarted (incarnation 1f -> 9a), losing its state");
  // kT0 answered as it was; kT3 is not the session's (and draining is not
  // a failure).
  EXPECT_TRUE(FailedTasks(probe, {{kT0, 0x1f}, {kT3, 0x99}}).empty());
  EXPECT_TRUE(FailedTasks(probe, {}).empty());
}

TEST(WaitForTasksTest, WaitsUntilEveryTaskAnswersAndNoneDrains) {
  ScriptedCluster c({kT0, kT1});
  for (int i = 0; i < 3; ++i) c[kT0].Queue(Reply::Fail(absl::UnavailableError("connection refused")));
  c[kT0].Set(Reply::Answer(0xa));
  for (int i = 0; i < 5; ++i) c[kT1].Queue(Reply::Answer(0xb, /*draining=*/true));
  c[kT1].Set(Reply::Answer(0xc));

  auto back = WaitForTasks(c.cache.get(), kWait, nullptr, absl::Milliseconds(1));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, (std::map<std::string, uint64_t>{{kT0, 0xa}, {kT1, 0xc}}));
  // It kept asking until the draining one came back as a new process.
  EXPECT_EQ(c[kT1].calls(), 6);
  EXPECT_EQ(c[kT0].calls(), 6);
}

TEST(WaitForTasksTest, DeadlineNamesTheTasksStillMissingAndWhy) {
  ScriptedCluster c({kT0, kT1, kT2});
  c[kT1].Set(Reply::Fail(absl::UnavailableError("connection refused")));
  c[kT2].Set(Reply::Answer(0x5, /*draining=*/true));
  auto back = WaitForTasks(c.cache.get(), absl::Milliseconds(10), nullptr, absl::Milliseconds(1));
  EXPECT_EQ(back.status().code(), absl::StatusCode::kDeadlineExceeded) << back.status();
  EXPECT_TRUE(absl::StrContains(back.status().message(),
                                "still missing: /job:worker/task:1 (connection refused); "
                                "/job:ps/task:0 (stopping after SIGTERM)"))
      << back.status();
  EXPECT_FALSE(absl::StrContains(back.status().message(), kT0)) << back.status();
  EXPECT_GE(c[kT1].calls(), 2);  // it polled rather than giving up at once
}

TEST(WaitForTasksTest, StopEndsTheWaitButAnAnswerWins) {
  ScriptedCluster c({kT0});
  c[kT0].Set(Reply::Fail(absl::UnavailableError("connection refused")));
  int asked = 0;
  auto stop = [&] { return ++asked >= 3; };
  auto back = WaitForTasks(c.cache.get(), absl::Hours(1), stop, absl::Milliseconds(1));
  EXPECT_EQ(back.status().code(), absl::StatusCode::kCancelled) << back.status();
  EXPECT_EQ(c[kT0].calls(), 3);

  // Every task answering is success even when `stop` would say stop.
  c[kT0].Set(Reply::Answer(0x7));
  back = WaitForTasks(c.cache.get(), absl::Hours(1), [] { return true; }, absl::Milliseconds(1));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->at(kT0), 0x7u);
}

TEST(WaitForRestartTest, ReturnsTheNewIncarnationOfThatTaskOnly) {
  ScriptedCluster c({kT0, kT1});
  c[kT1].Set(Reply::Fail(absl::UnavailableError("not this one")));  // other tasks do not matter
  c[kT0].Queue(Reply::Answer(0x1));                                // not restarted yet
  c[kT0].Queue(Reply::Fail(absl::UnavailableError("connection refused")));
  c[kT0].Queue(Reply::Answer(0x2, /*draining=*/true));  // new, but stopping again
  c[kT0].Set(Reply::Answer(0x3));
  auto back = WaitForRestart(c.cache.get(), kT0, 0x1, kWait, nullptr, absl::Milliseconds(1));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, 0x3u);
  EXPECT_EQ(c[kT0].calls(), 4);
}

TEST(WaitForRestartTest, DeadlineSaysWhatIsAwaited) {
  ScriptedCluster c({kT0});
  c[kT0].Set(Reply::Answer(0x1));
  auto back = WaitForRestart(c.cache.get(), kT0, 0x1, absl::Milliseconds(5), nullptr, absl::Milliseconds(1));
  EXPECT_EQ(back.status().code(), absl::StatusCode::kDeadlineExceeded) << back.status();
  EXPECT_TRUE(absl::StrContains(back.status().message(), "still missing: /job:worker/task:0 (not restarted yet)"))
      << back.status();

  back = WaitForRestart(c.cache.get(), kT3, 0x1, absl::Milliseconds(5), nullptr, absl::Milliseconds(1));
  EXPECT_EQ(back.status().code(), absl::StatusCode::kDeadlineExceeded) << back.status();
  EXPECT_TRUE(absl::StrContains(back.status().message(), "/job:ps/task:1 (not in the cluster)")) << back.status();
}

// What a Heartbeat reported, for the test to wait on.
class Reports {
 public:
  void Failure(const TaskFailure& f) {
    absl::MutexLock lock(&mu_);
    failures_.push_back(f);
  }
  void Draining(const std::string& task) {
    absl::MutexLock lock(&mu_);
    draining_.push_back(task);
  }
  // The failures once there are at least `n`; fails the test naming what
  // it waited for otherwise.
  std::vector<TaskFailure> AwaitFailures(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return failures_.size() >= n; };
    EXPECT_TRUE(mu_.AwaitWithTimeout(absl::Condition(&enough), kWait))
        << "the heartbeat reported " << failures_.size() << " failure(s), not " << n;
    return failures_;
  }
  std::vector<std::string> AwaitDraining(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return draining_.size() >= n; };
    EXPECT_TRUE(mu_.AwaitWithTimeout(absl::Condition(&enough), kWait))
        << "the heartbeat reported " << draining_.size() << " draining task(s), not " << n;
    return draining_;
  }
  std::vector<TaskFailure> failures() {
    absl::MutexLock lock(&mu_);
    return failures_;
  }
  std::vector<std::string> draining() {
    absl::MutexLock lock(&mu_);
    return draining_;
  }

 private:
  absl::Mutex mu_;
  std::vector<TaskFailure> failures_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> draining_ ABSL_GUARDED_BY(mu_);
};

std::unique_ptr<Heartbeat> StartHeartbeat(ScriptedCluster* c, std::map<std::string, uint64_t> known,
                                          Reports* reports) {
  return std::make_unique<Heartbeat>(
      c->cache.get(), std::move(known), absl::Milliseconds(1), absl::Seconds(5),
      [reports](const TaskFailure& f) { reports->Failure(f); },
      [reports](const std::string& task) { reports->Draining(task); });
}

TEST(HeartbeatTest, ReportsARestartedTaskOnceUntilUpdated) {
  ScriptedCluster c({kT0, kT1});
  c[kT0].Set(Reply::Answer(0xa));
  c[kT1].Set(Reply::Answer(0xb));
  Reports reports;
  auto heartbeat = StartHeartbeat(&c, {{kT0, 0xa}, {kT1, 0xb}}, &reports);
  // Healthy probes report nothing.
  ASSERT_TRUE(c[kT1].AwaitCalls(3, kWait)) << "no heartbeat probes";
  EXPECT_TRUE(reports.failures().empty());

  c[kT1].Set(Reply::Answer(0xc));
  std::vector<TaskFailure> failures = reports.AwaitFailures(1);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].task, kT1);
  EXPECT_EQ(failures[0].reason, "restarted (incarnation b -> c), losing its state");
  // Later probes see the same failure and do not report it again.
  const int seen = c[kT1].calls();
  ASSERT_TRUE(c[kT1].AwaitCalls(seen + 5, kWait)) << "the heartbeat stopped probing";
  EXPECT_EQ(reports.failures().size(), 1u);

  // The job goes on with the new process: a later restart is news again.
  heartbeat->Update(kT1, 0xc);
  c[kT1].Set(Reply::Answer(0xd));
  failures = reports.AwaitFailures(2);
  ASSERT_EQ(failures.size(), 2u);
  EXPECT_EQ(failures[1].task, kT1);
  EXPECT_EQ(failures[1].reason, "restarted (incarnation c -> d), losing its state");
  EXPECT_TRUE(reports.draining().empty());
}

TEST(HeartbeatTest, UnreachableAndDrainingTasksAreReportedOnceEach) {
  ScriptedCluster c({kT0, kT1, kT2});
  c[kT0].Set(Reply::Fail(absl::UnavailableError("connection refused")));
  c[kT1].Set(Reply::Answer(0xb, /*draining=*/true));
  c[kT2].Set(Reply::Fail(absl::UnavailableError("not the job's")));
  Reports reports;
  // kT2 is not one of the session's tasks: not judged.
  auto heartbeat = StartHeartbeat(&c, {{kT0, 0xa}, {kT1, 0xb}}, &reports);
  std::vector<TaskFailure> failures = reports.AwaitFailures(1);
  std::vector<std::string> draining = reports.AwaitDraining(1);
  const int seen = c[kT0].calls();
  ASSERT_TRUE(c[kT0].AwaitCalls(seen + 5, kWait)) << "the heartbeat stopped probing";
  heartbeat.reset();  // joins its thread: nothing is reported after this

  failures = reports.failures();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].task, kT0);
  EXPECT_EQ(failures[0].reason, "unreachable: connection refused");
  // Draining (with its own incarnation) is no failure, and is said once.
  EXPECT_EQ(reports.draining(), std::vector<std::string>{kT1});
}

TEST(HeartbeatTest, AProbeThatTimesOutCountsAsUnreachable) {
  ScriptedCluster c({kT0});
  c[kT0].Set(Reply::Hold());
  Reports reports;
  auto heartbeat = std::make_unique<Heartbeat>(
      c.cache.get(), std::map<std::string, uint64_t>{{kT0, 0xa}}, absl::Milliseconds(1), absl::Milliseconds(5),
      [&reports](const TaskFailure& f) { reports.Failure(f); }, nullptr);
  std::vector<TaskFailure> failures = reports.AwaitFailures(1);
  heartbeat.reset();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].task, kT0);
  EXPECT_EQ(failures[0].reason, "unreachable: task /job:worker/task:0: no answer to GetStatus within 5ms");
  c[kT0].Release(Reply::Answer(0xa));  // the held calls' state outlived the probes
}

}  // namespace
}  // namespace master
}  // namespace weft
