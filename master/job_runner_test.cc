// The job runner (its step arithmetic and recovery decisions are tested in
// step_drivers_test.cc and recovery_policy_test.cc): whole distributed jobs on in-process tasks that restart, vanish or
// fail under them (FlakyWorkers).
#include "master/job_runner.h"

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/text_format.h"
#include "graph/lowering.h"
#include "gtest/gtest.h"
#include "master/in_process_cluster.h"
#include "runtime/data/test_files.h"

namespace weft {
namespace master {
namespace {

using data::testing::IdxBytes;
using data::testing::TempPath;
using data::testing::WriteFile;

constexpr char kPs[] = "/job:ps/task:0";
constexpr char kW0[] = "/job:worker/task:0";
constexpr char kW1[] = "/job:worker/task:1";

JobSpec Job(const std::string& text) {
  JobSpec job;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &job)) << text;
  return job;
}

// ---- Whole jobs on tasks that fail under them ----

// Forwards to the in-process tasks, and fails them on command: a task can
// "restart" (its RunGraph number n fails UNAVAILABLE and from then on it
// reports another incarnation), go down (every call UNAVAILABLE until
// revived), or fail one RunGraph with an error of the job's own.
class FlakyWorkers final : public WorkerCacheInterface {
 public:
  explicit FlakyWorkers(WorkerCacheInterface* inner) : inner_(inner) {}

  void RestartAtRunGraph(const std::string& task, int n) {
    With(task, [n](State* s) { s->restart_at = n; });
  }
  void FailRunGraph(const std::string& task, int n, absl::Status error) {
    With(task, [n, &error](State* s) {
      s->fail_at = n;
      s->fail_with = error;
    });
  }
  void SetDown(const std::string& task, bool down) {
    With(task, [down](State* s) { s->down = down; });
  }
  int run_graphs(const std::string& task) {
    int n = 0;
    With(task, [&n](State* s) { n = s->run_graphs; });
    return n;
  }
  int registrations(const std::string& task) {
    int n = 0;
    With(task, [&n](State* s) { n = s->registrations; });
    return n;
  }

  std::vector<std::string> ListTasks() const override { return inner_->ListTasks(); }
  WorkerInterface* GetOrCreateWorker(const std::string& task) override {
    WorkerInterface* w = inner_->GetOrCreateWorker(task);
    if (w == nullptr) return nullptr;
    absl::MutexLock lock(&mu_);
    std::unique_ptr<Flaky>& f = flaky_[task];
    if (f == nullptr) f = std::make_unique<Flaky>(w, &mu_, &states_[task]);
    return f.get();
  }

 private:
  struct State {
    int run_graphs = 0;
    int registrations = 0;
    int restart_at = 0;  // 0: none
    int fail_at = 0;
    absl::Status fail_with;
    uint64_t restarts = 0;  // added to the real incarnation
    bool down = false;
  };

  class Flaky final : public WorkerInterface {
   public:
    Flaky(WorkerInterface* w, absl::Mutex* mu, State* s) : w_(w), mu_(mu), s_(s) {}
    const std::string& task() const override { return w_->task(); }

    void GetStatusAsync(const GetStatusRequest* q, GetStatusResponse* r, StatusCallback done) override {
      uint64_t restarts = 0;
      {
        absl::MutexLock lock(mu_);
        if (s_->down) return done(Down());
        restarts = s_->restarts;
      }
      w_->GetStatusAsync(q, r, [r, restarts, done = std::move(done)](const absl::Status& s) {
        r->set_incarnation(r->incarnation() + restarts);
        done(s);
      });
    }
    void RegisterGraphAsync(const RegisterGraphRequest* q, RegisterGraphResponse* r, StatusCallback done) override {
      {
        absl::MutexLock lock(mu_);
        if (s_->down) return done(Down());
        ++s_->registrations;
      }
      w_->RegisterGraphAsync(q, r, std::move(done));
    }
    void DeregisterGraphAsync(const DeregisterGraphRequest* q, DeregisterGraphResponse* r,
                              StatusCallback done) override {
      if (IsDown()) return done(Down());
      w_->DeregisterGraphAsync(q, r, std::move(done));
    }
    void RunGraphAsync(const RunGraphRequest* q, RunGraphResponse* r, absl::Duration t, StatusCallback done) override {
      absl::Status injected;
      {
        absl::MutexLock lock(mu_);
        if (s_->down) return done(Down());
        const int n = ++s_->run_graphs;
        if (n == s_->restart_at) {
          ++s_->restarts;
          injected = absl::UnavailableError(absl::StrCat("task ", task(), ": connection reset (injected restart)"));
        } else if (n == s_->fail_at) {
          injected = s_->fail_with;
        }
      }
      if (!injected.ok()) return done(injected);
      w_->RunGraphAsync(q, r, t, std::move(done));
    }
    void AbortStepAsync(const AbortStepRequest* q, AbortStepResponse* r, StatusCallback done) override {
      if (IsDown()) return done(Down());
      w_->AbortStepAsync(q, r, std::move(done));
    }
    void CleanupStepAsync(const CleanupStepRequest* q, CleanupStepResponse* r, StatusCallback done) override {
      if (IsDown()) return done(Down());
      w_->CleanupStepAsync(q, r, std::move(done));
    }

   private:
    bool IsDown() {
      absl::MutexLock lock(mu_);
      return s_->down;
    }
    absl::Status Down() const {
      return absl::UnavailableError(absl::StrCat("task ", task(), ": connection refused (injected)"));
    }

    WorkerInterface* const w_;
    absl::Mutex* const mu_;
    State* const s_;  // its fields are guarded by *mu_
  };

  void With(const std::string& task, const std::function<void(State*)>& fn) {
    absl::MutexLock lock(&mu_);
    fn(&states_[task]);
  }

  WorkerCacheInterface* const inner_;
  absl::Mutex mu_;
  // A task's Flaky holds the address of its State (map nodes stay put).
  std::map<std::string, State> states_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Flaky>> flaky_ ABSL_GUARDED_BY(mu_);
};

// 4x4 images in 2 classes.
std::string DataDir() {
  static const std::string dir = [] {
    const std::string d = TempPath("");
    for (const char* split : {"train", "test"}) {
      const uint32_t n = 64;
      std::vector<uint8_t> pixels, labels;
      for (uint32_t i = 0; i < n; ++i) {
        labels.push_back(static_cast<uint8_t>(i % 2));
        for (int j = 0; j < 16; ++j) pixels.push_back(j % 2 == static_cast<int>(i % 2) ? 200 : 20);
      }
      WriteFile(absl::StrCat(d, "/", split, "-images"), IdxBytes({n, 4, 4}, pixels));
      WriteFile(absl::StrCat(d, "/", split, "-labels"), IdxBytes({n}, labels));
    }
    return d;
  }();
  return dir;
}

// A sync PARAMETER_SERVER job of `steps` steps on one worker and one ps,
// without evaluation; the heartbeat and the recovery poll are quick.
// One step per RunGraph, so that a fault injected at the kth RunGraph hits
// step k.
JobSpec PsJob(int64_t steps) {
  JobSpec job = Job(absl::StrCat(R"(name: "flaky"
      model { input_shape: [16] num_classes: 2
              layer { dense { units: 4 activation: RELU } } layer { dense { units: 2 } } }
      dataset { train_images: "train-images" train_labels: "train-labels"
                test_images: "test-images" test_labels: "test-labels" scale: 255 }
      optimizer { sgd { learning_rate: 0.1 } }
      eval { skip: true }
      strategy { kind: PARAMETER_SERVER sync: true steps_per_execution: 1 }
      recovery { heartbeat_ms: 10 heartbeat_timeout_ms: 2000 task_wait_seconds: 30 max_restarts: 2 }
      batch_size: 8 seed: 3 intra_op_threads: 1 steps: )",
                                 steps));
  job.mutable_dataset()->set_dir(DataDir());
  return job;
}

// The job's status as the runner's updates leave it, and each state it
// entered.
class StatusLog {
 public:
  std::function<void(const std::function<void(JobStatus*)>&)> Updater() {
    return [this](const std::function<void(JobStatus*)>& update) {
      absl::MutexLock lock(&mu_);
      update(&status_);
      if (states_.empty() || states_.back() != status_.state()) states_.push_back(status_.state());
      if (on_update_) on_update_(status_);
    };
  }
  // Runs after every update, under the log's lock.
  void OnUpdate(std::function<void(const JobStatus&)> fn) {
    absl::MutexLock lock(&mu_);
    on_update_ = std::move(fn);
  }
  JobStatus status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }
  std::vector<JobState> states() {
    absl::MutexLock lock(&mu_);
    return states_;
  }

 private:
  absl::Mutex mu_;
  JobStatus status_ ABSL_GUARDED_BY(mu_);
  std::vector<JobState> states_ ABSL_GUARDED_BY(mu_);
  std::function<void(const JobStatus&)> on_update_ ABSL_GUARDED_BY(mu_);
};

class JobRunnerRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = InProcessCluster::Create({kPs, kW0});
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
    flaky_ = std::make_unique<FlakyWorkers>(cluster_->workers());
  }

  std::unique_ptr<JobRunner> Runner(const JobSpec& job) {
    auto training = LowerJob(job);
    EXPECT_TRUE(training.ok()) << training.status();
    JobRunnerOptions o;
    o.update_status = log_.Updater();
    return std::make_unique<JobRunner>(job, *std::move(training), "job/flaky", flaky_.get(), std::move(o));
  }

  std::unique_ptr<InProcessCluster> cluster_;
  std::unique_ptr<FlakyWorkers> flaky_;
  StatusLog log_;
};

TEST_F(JobRunnerRecoveryTest, ARestartedWorkerIsRecoveredAndTheJobFinishes) {
  // The worker dies in its 5th step (4 done) and comes back as a new process.
  flaky_->RestartAtRunGraph(kW0, 5);
  auto runner = Runner(PsJob(12));
  absl::StatusOr<TrainResult> r = runner->Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->state, SUCCEEDED);
  EXPECT_EQ(r->steps, 12);

  const JobStatus s = log_.status();
  EXPECT_EQ(s.restarts(), 1);
  EXPECT_EQ(s.failed_task(), kW0);
  EXPECT_TRUE(absl::StartsWith(s.failure(), "restarted (incarnation ")) << s.failure();
  EXPECT_TRUE(absl::StrContains(s.failure(), "injected restart")) << s.failure();
  EXPECT_GT(s.failure_time_unix_ms(), 0);
  // Without checkpoints the second attempt starts over: the 4 steps done
  // are trained again.
  EXPECT_EQ(s.steps_lost(), 4);
  EXPECT_EQ(log_.states(), (std::vector<JobState>{RECOVERING, RUNNING}));
  // The first attempt's 4 steps, its failed 5th and the 6th queued behind
  // it (steps_in_flight 2), then all 12 again.
  EXPECT_EQ(flaky_->run_graphs(kW0), 6 + 12);
  // The new attempt registered its own session's graphs; every graph of
  // both attempts is released at the end.
  EXPECT_EQ(flaky_->registrations(kW0), 2);
  EXPECT_EQ(cluster_->worker(kW0)->NumGraphs(), 0);
  EXPECT_EQ(cluster_->worker(kPs)->NumGraphs(), 0);
}

TEST_F(JobRunnerRecoveryTest, WithoutRestartsTheFirstTaskFailureEndsTheJob) {
  flaky_->RestartAtRunGraph(kW0, 3);
  JobSpec job = PsJob(12);
  job.mutable_recovery()->set_max_restarts(-1);
  absl::StatusOr<TrainResult> r = Runner(job)->Run();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_TRUE(absl::StartsWith(r.status().message(), "task /job:worker/task:0 restarted (incarnation "))
      << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "the job gave up after 0 recoveries")) << r.status();
  EXPECT_TRUE(log_.states().empty());  // never RECOVERING
  EXPECT_EQ(flaky_->run_graphs(kW0), 3 + 1);  // and the step queued behind the failed one
}

TEST_F(JobRunnerRecoveryTest, AnErrorOfTheJobItselfIsNotRecovered) {
  flaky_->FailRunGraph(kW0, 2, absl::InvalidArgumentError("node 'dense_1/MatMul' (MatMul): the input has NaN"));
  absl::StatusOr<TrainResult> r = Runner(PsJob(12))->Run();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_EQ(r.status().message(),
            "training step 2: task /job:worker/task:0: node 'dense_1/MatMul' (MatMul): the input has NaN");
  EXPECT_TRUE(log_.states().empty());
  EXPECT_EQ(log_.status().restarts(), 0);
  EXPECT_EQ(flaky_->run_graphs(kW0), 2 + 1);  // and the step queued behind the failed one
}

TEST_F(JobRunnerRecoveryTest, ATaskThatDoesNotComeBackInTimeFailsTheJobNamingIt) {
  JobSpec job = PsJob(12);
  job.mutable_recovery()->set_task_wait_seconds(1);
  // Down from the start: the first attempt fails before it has a session,
  // and the probe after it finds the worker unreachable.
  flaky_->SetDown(kW0, true);
  absl::StatusOr<TrainResult> r = Runner(job)->Run();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_TRUE(absl::StartsWith(r.status().message(),
                               "task /job:worker/task:0 unreachable: task /job:worker/task:0: connection refused"))
      << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "did not come back (recovery.task_wait_seconds)")) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "still missing: /job:worker/task:0 (")) << r.status();
  EXPECT_EQ(log_.status().failed_task(), kW0);
  EXPECT_EQ(log_.status().restarts(), 1);
  EXPECT_EQ(log_.states(), std::vector<JobState>{RECOVERING});
  EXPECT_EQ(flaky_->registrations(kW0), 0);
}

TEST_F(JobRunnerRecoveryTest, ACancelWhileWaitingForTheTasksEndsTheJobCancelled) {
  JobSpec job = PsJob(12);
  job.mutable_recovery()->set_task_wait_seconds(3600);
  flaky_->SetDown(kW0, true);
  auto runner = Runner(job);
  log_.OnUpdate([&runner](const JobStatus& s) {
    if (s.state() == RECOVERING) runner->Cancel();
  });
  // Waiting out task_wait_seconds would take an hour.
  absl::StatusOr<TrainResult> r = runner->Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->state, CANCELLED);
  EXPECT_EQ(log_.states(), std::vector<JobState>{RECOVERING});
}

TEST_F(JobRunnerRecoveryTest, AResumeFromWithoutACheckpointFailsBeforeAnyTaskWorks) {
  JobSpec job = PsJob(12);
  job.mutable_checkpoint()->set_dir(TempPath("no-checkpoints-here"));
  job.mutable_checkpoint()->set_resume_from(TempPath("nor-here"));
  absl::StatusOr<TrainResult> r = Runner(job)->Run();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), absl::StrCat("resume_from ", TempPath("nor-here"),
                                                                   " holds no valid checkpoint")))
      << r.status();
  EXPECT_EQ(flaky_->registrations(kW0), 0);
  EXPECT_EQ(flaky_->run_graphs(kW0), 0);
}

// ---- A job without a strategy ----

TEST_F(JobRunnerRecoveryTest, AJobWithoutAStrategyReadsItsInputOnTheWorkerWithLocalTrainersFigures) {
  JobSpec job = PsJob(0);
  job.clear_strategy();
  job.clear_recovery();
  job.clear_steps();
  job.set_epochs(2);
  job.mutable_eval()->set_skip(false);
  int progress_calls = 0;
  absl::StatusOr<TrainResult> r = Runner(job)->Run([&](const TrainProgress&) { ++progress_calls; });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->state, SUCCEEDED);
  EXPECT_EQ(r->steps, 2 * (64 / 8));
  EXPECT_EQ(r->epochs, 2);
  EXPECT_EQ(r->test_examples, 64);
  EXPECT_GT(progress_calls, 0);
  // The steps ran on the worker, which read the batches.
  EXPECT_GT(flaky_->run_graphs(kW0), 0);

  auto local = LocalTrainer::Create(job);
  ASSERT_TRUE(local.ok()) << local.status();
  auto want = (*local)->Train();
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(r->steps, want->steps);
  EXPECT_EQ(r->epochs, want->epochs);
  EXPECT_NEAR(r->train_loss, want->train_loss, 1e-5);
  EXPECT_NEAR(r->test_accuracy, want->test_accuracy, 1e-9);
  EXPECT_NEAR(r->test_loss, want->test_loss, 1e-5);
}

}  // namespace
}  // namespace master
}  // namespace weft
