// StepWatch against fake tasks: a stalled step is diagnosed naming the task
// that does not answer, the diagnosis goes inactive when the step ends, and
// per-task step times are published with their straggler.
#include "master/step_watch.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/test_util.h"
#include "common/metrics.h"
#include "gtest/gtest.h"
#include "master/fake_worker.h"
#include "master/worker_cache.h"

namespace weft {
namespace master {
namespace {

using weft::testing::kWaitTimeout;
using weft::testing::WaitUntil;

constexpr char kW0[] = "/job:worker/task:0";
constexpr char kW1[] = "/job:worker/task:1";

// Answers GetStepState with `state`, or, silent, holds the call until the
// test ends (as a stopped process would).
class StateTask final : public FakeWorker {
 public:
  explicit StateTask(std::string task) : FakeWorker(std::move(task)) {}
  ~StateTask() override { Release(); }

  void Set(GetStepStateResponse state, bool silent) {
    absl::MutexLock lock(&mu_);
    state_ = std::move(state);
    silent_ = silent;
  }
  int calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  void Release() {
    std::vector<StatusCallback> held;
    {
      absl::MutexLock lock(&mu_);
      held.swap(held_);
    }
    for (auto& done : held) done(absl::DeadlineExceededError("released"));
  }

  void GetStepStateAsync(const GetStepStateRequest*, GetStepStateResponse* response, absl::Duration,
                         StatusCallback done) override {
    {
      absl::MutexLock lock(&mu_);
      ++calls_;
      if (silent_) {
        held_.push_back(std::move(done));
        return;
      }
      *response = state_;
    }
    done(absl::OkStatus());
  }

 private:
  mutable absl::Mutex mu_;
  GetStepStateResponse state_ ABSL_GUARDED_BY(mu_);
  bool silent_ ABSL_GUARDED_BY(mu_) = false;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<StatusCallback> held_ ABSL_GUARDED_BY(mu_);
};

// Two fake tasks and the job status the watch writes, as a JobManager would.
class StepWatchTest : public ::testing::Test {
 protected:
  StepWatchTest() {
    cache_ = *WorkerCache::CreateLocal(tasks_, [this](const std::string& task, const std::string&) {
      auto t = std::make_unique<StateTask>(task);
      fakes_[task] = t.get();
      return t;
    });
    for (const std::string& t : tasks_) cache_->GetOrCreateWorker(t);
  }

  std::unique_ptr<StepWatch> Watch(StepWatchOptions o) {
    auto apply = [this](const std::function<void(JobStatus*)>& update) {
      absl::MutexLock lock(&mu_);
      update(&status_);
    };
    return std::make_unique<StepWatch>("test-job", cache_.get(), o, apply, apply);
  }
  JobStatus Status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }
  StepObserver::StepInfo Step(int64_t id, bool trains = true) {
    return StepObserver::StepInfo{id, 1, trains, &tasks_, absl::Now()};
  }

  const std::vector<std::string> tasks_ = {kW0, kW1};
  std::map<std::string, StateTask*> fakes_;  // owned by the cache
  std::unique_ptr<WorkerCache> cache_;
  absl::Mutex mu_;
  JobStatus status_ ABSL_GUARDED_BY(mu_);
};

TEST_F(StepWatchTest, AStalledStepNamesTheSilentTaskUntilTheStepEnds) {
  GetStepStateResponse waiting;
  PendingCollective* c = waiting.add_collective();
  c->set_step_id(1000);
  c->set_recv_from_task(kW1);
  c->set_send_to_task(kW1);
  c->set_chunks_missing(3);
  c->set_chunks_total(4);
  fakes_[kW0]->Set(waiting, /*silent=*/false);
  fakes_[kW1]->Set({}, /*silent=*/true);
  StepWatchOptions o;
  o.floor = absl::Milliseconds(100);
  o.probe_timeout = absl::Milliseconds(200);
  o.renew_every = absl::Milliseconds(100);
  auto watch = Watch(o);
  watch->NoteProgress(811);
  watch->StepStarted(Step(1000));
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "a diagnosis of step 812", [&] { return Status().diagnosis_active(); }));
  JobStatus s = Status();
  EXPECT_TRUE(absl::StartsWith(s.diagnosis(), "step 812 (")) << s.diagnosis();
  EXPECT_TRUE(absl::StrContains(s.diagnosis(),
                                "waits on worker:1: it did not answer within 200 ms; worker:0 waits for its "
                                "all-reduce chunk from worker:1"))
      << s.diagnosis();
  EXPECT_GT(s.diagnosis_time_unix_ms(), 0);
  // Renewed while the step stays stalled.
  const int calls = fakes_[kW0]->calls();
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "a renewed probe", [&] { return fakes_[kW0]->calls() > calls; }));

  watch->RunGraphDone(1000, kW0, absl::Seconds(1), absl::AbortedError("aborted"));
  watch->StepEnded(1000, absl::AbortedError("aborted"));
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "the diagnosis to go inactive", [&] { return !Status().diagnosis_active(); }));
  EXPECT_TRUE(absl::StrContains(Status().diagnosis(), "waits on worker:1")) << "kept after the step ended";
  watch.reset();
  fakes_[kW1]->Release();
}

// A checkpoint held up by a stopped task is diagnosed as a step is, named
// as the checkpoint of its step, and its end is told as a step's.
TEST_F(StepWatchTest, AStalledCheckpointNamesTheSilentTask) {
  fakes_[kW0]->Set({}, /*silent=*/false);
  fakes_[kW1]->Set({}, /*silent=*/true);
  StepWatchOptions o;
  o.floor = absl::Milliseconds(100);
  o.probe_timeout = absl::Milliseconds(200);
  auto watch = Watch(o);
  watch->NoteProgress(7);
  StepObserver::StepInfo save = Step(-201, /*trains=*/false);
  save.checkpoint_step = 200;
  watch->StepStarted(save);
  watch->RunGraphDone(-201, kW0, absl::Milliseconds(5), absl::OkStatus());
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "a diagnosis of the checkpoint", [&] { return Status().diagnosis_active(); }));
  const std::string said = Status().diagnosis();
  EXPECT_TRUE(absl::StartsWith(said, "the checkpoint of step 200 (")) << said;
  EXPECT_TRUE(absl::StrContains(said, "waits on worker:1: it did not answer within 200 ms")) << said;
  EXPECT_FALSE(absl::StrContains(said, "worker:0")) << "worker:0 saved its shard: " << said;
  watch->StepEnded(-201, absl::UnavailableError("keepalive watchdog timeout"));
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "the diagnosis to go inactive", [&] { return !Status().diagnosis_active(); }));
  // A checkpoint is no training step: its time is nobody's step time.
  EXPECT_EQ(Status().task_step_time_size(), 0);
  watch.reset();
  fakes_[kW1]->Release();
}

// A pipelined step waits on its tasks for the step before it: it is timed,
// and can stall, only from the end of that step on.
TEST_F(StepWatchTest, APipelinedStepIsTimedFromTheEndOfTheStepBeforeIt) {
  fakes_[kW0]->Set({}, /*silent=*/false);
  fakes_[kW1]->Set({}, /*silent=*/false);
  StepWatchOptions o;
  o.floor = absl::Milliseconds(100);
  o.renew_every = absl::Milliseconds(100);
  auto watch = Watch(o);
  watch->NoteProgress(41);
  watch->StepStarted(Step(1));
  StepObserver::StepInfo second = Step(2);
  second.after_step_id = 1;
  watch->StepStarted(second);
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "a diagnosis", [&] { return Status().diagnosis_active(); }));
  EXPECT_TRUE(absl::StartsWith(Status().diagnosis(), "step 42 (")) << Status().diagnosis();

  for (const char* t : {kW0, kW1}) watch->RunGraphDone(1, t, absl::Seconds(1), absl::OkStatus());
  watch->StepEnded(1, absl::OkStatus());
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "the second step's diagnosis",
                        [&] { return absl::StartsWith(Status().diagnosis(), "step 43 ("); }));
  for (const char* t : {kW0, kW1}) watch->RunGraphDone(2, t, absl::Seconds(1), absl::OkStatus());
  watch->StepEnded(2, absl::OkStatus());
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "the diagnosis to go inactive", [&] { return !Status().diagnosis_active(); }));
}

TEST_F(StepWatchTest, PublishesEachTasksStepTimesAndItsStraggler) {
  StepWatchOptions o;
  o.publish_every = absl::ZeroDuration();
  auto watch = Watch(o);
  watch->SetPeers({kW0, kW1});
  watch->ExportMetrics("job-watch-test");
  for (int64_t id = 1; id <= 10; ++id) {
    watch->StepStarted(Step(id));
    watch->RunGraphDone(id, kW0, absl::Milliseconds(10), absl::OkStatus());
    watch->RunGraphDone(id, kW1, absl::Milliseconds(40), absl::OkStatus());
    watch->StepEnded(id, absl::OkStatus());
  }
  // An evaluation step and a failed one do not count.
  watch->StepStarted(Step(11, /*trains=*/false));
  watch->RunGraphDone(11, kW0, absl::Seconds(9), absl::OkStatus());
  watch->StepEnded(11, absl::OkStatus());
  watch->StepStarted(Step(12));
  watch->RunGraphDone(12, kW1, absl::Seconds(9), absl::AbortedError("x"));
  watch->StepEnded(12, absl::AbortedError("x"));

  JobStatus s = Status();
  ASSERT_EQ(s.task_step_time_size(), 2) << s.DebugString();
  EXPECT_EQ(s.task_step_time(0).task(), kW0);
  EXPECT_EQ(s.task_step_time(0).steps(), 10);
  EXPECT_DOUBLE_EQ(s.task_step_time(0).p50_seconds(), 0.01);
  EXPECT_FALSE(s.task_step_time(0).straggler());
  EXPECT_EQ(s.task_step_time(1).task(), kW1);
  EXPECT_DOUBLE_EQ(s.task_step_time(1).p99_seconds(), 0.04);
  EXPECT_TRUE(s.task_step_time(1).straggler());
  // Steps that end long before the floor are never asked about.
  EXPECT_EQ(fakes_[kW0]->calls() + fakes_[kW1]->calls(), 0);
  EXPECT_TRUE(s.diagnosis().empty());
  // The same times reach /metrics, per job and task; the evaluation and the
  // failed step do not.
  const std::string text = metrics::Registry::Default().Render();
  EXPECT_TRUE(absl::StrContains(
      text, "weft_task_step_duration_seconds_count{job=\"job-watch-test\",task=\"/job:worker/task:1\"} 10\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text, "weft_task_step_duration_seconds_bucket{job=\"job-watch-test\",task=\"/job:worker/task:1\",le=\"0.025\"} 0\n"))
      << text;
}

}  // namespace
}  // namespace master
}  // namespace weft
