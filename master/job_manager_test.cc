#include "master/job_manager.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "google/protobuf/text_format.h"
#include "graph/lowering.h"
#include "gtest/gtest.h"
#include "common/confined_root.h"
#include "common/env.h"
#include "common/status_macros.h"
#include "common/test_util.h"
#include "master/gated_workers.h"
#include "master/in_process_cluster.h"
#include "runtime/data/test_files.h"
#include "runtime/trainer.h"

namespace weft {
namespace master {
namespace {

using data::testing::IdxBytes;
using data::testing::TempPath;
using data::testing::WriteFile;

constexpr char kPs[] = "/job:ps/task:0";
constexpr char kW0[] = "/job:worker/task:0";

// 4x4 images in 3 classes: class c lights pixels [5c, 5c + 5) over noise.
void WriteSplit(const std::string& prefix, uint32_t n, uint32_t seed) {
  std::vector<uint8_t> pixels, labels;
  uint32_t state = seed;
  auto noise = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<uint8_t>((state >> 24) % 60);
  };
  for (uint32_t i = 0; i < n; ++i) {
    const int c = static_cast<int>((i * 7 + seed) % 3);
    labels.push_back(static_cast<uint8_t>(c));
    for (int j = 0; j < 16; ++j) pixels.push_back(j / 5 == c ? 180 + noise() : noise());
  }
  WriteFile(prefix + "-images", IdxBytes({n, 4, 4}, pixels));
  WriteFile(prefix + "-labels", IdxBytes({n}, labels));
}

std::string DataDir() {
  static const std::string dir = [] {
    const std::string d = TempPath("");
    WriteSplit(d + "/train", 240, 1);
    WriteSplit(d + "/test", 60, 2);
    return d;
  }();
  return dir;
}

JobSpec ParseJob(const std::string& text) {
  JobSpec job;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &job)) << text;
  job.mutable_dataset()->set_dir(DataDir());
  job.mutable_dataset()->set_train_images("train-images");
  job.mutable_dataset()->set_train_labels("train-labels");
  job.mutable_dataset()->set_test_images("test-images");
  job.mutable_dataset()->set_test_labels("test-labels");
  return job;
}

JobSpec MlpJob(int epochs = 3, int num_classes = 3) {
  return ParseJob(absl::StrCat(R"(name: "tiny"
      model { input_shape: [16] num_classes: )", num_classes, R"(
              layer { dense { units: 16 activation: RELU } }
              layer { dense { units: )", num_classes, R"( } } }
      dataset { scale: 255 }
      optimizer { adam { learning_rate: 0.01 } }
      batch_size: 16 epochs: )", epochs, R"( seed: 1 intra_op_threads: 1)"));
}

// The MLP as a raw graph model with its variables requested on ps.
JobSpec GraphJobWithVariablesOnPs(int num_classes = 3) {
  JobSpec spec = MlpJob(3, num_classes);
  auto tg = LowerJob(spec);
  EXPECT_TRUE(tg.ok()) << tg.status();
  for (const auto& n : tg->graph->nodes()) {
    if (n->op() == "Variable") n->set_requested_device(kPs);
  }
  GraphModel* gm = spec.mutable_graph();  // replaces the model spec
  *gm->mutable_graph() = tg->graph->ToGraphDef();
  gm->set_features(tg->features);
  gm->set_labels(tg->labels);
  gm->set_loss(tg->loss);
  gm->set_train_op(tg->train_op);
  gm->set_correct(tg->correct);
  gm->set_eval_loss(tg->eval_loss);
  return spec;
}

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = InProcessCluster::Create({kPs, kW0});
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
  }
  std::unique_ptr<JobManager> Manager(absl::Duration interval = absl::Seconds(1)) {
    return std::make_unique<JobManager>(JobManagerOptions{cluster_->workers(), nullptr, interval});
  }

  std::unique_ptr<InProcessCluster> cluster_;  // outlives every manager
};

TEST_F(JobManagerTest, TrainsToSucceededWithTheFiguresOfALocalRun) {
  const JobSpec job = GraphJobWithVariablesOnPs();
  auto jm = Manager();
  auto id = jm->Submit(job);
  ASSERT_TRUE(id.ok()) << id.status();
  auto st = jm->Wait(*id, absl::Seconds(120));
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_EQ(st->state(), SUCCEEDED) << st->error();
  EXPECT_GT(st->test_accuracy(), 0.9);  // chance is 1/3
  EXPECT_EQ(st->test_examples(), 60);
  EXPECT_EQ(st->step(), 3 * (240 / 16));
  EXPECT_EQ(st->epoch(), 3);
  EXPECT_GT(st->samples_per_second(), 0);
  EXPECT_GT(st->warmup_seconds(), 0);  // the first call of steps, timed apart
  EXPECT_GT(st->wall_seconds(), 0);
  EXPECT_EQ(st->name(), "tiny");
  // Every epoch's end, in order, whichever statuses a watcher saw.
  ASSERT_EQ(st->epoch_end_size(), 3);
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(st->epoch_end(e).epoch(), e + 1);
    EXPECT_EQ(st->epoch_end(e).step(), (e + 1) * (240 / 16));
    EXPECT_GT(st->epoch_end(e).train_loss(), 0);
  }
  EXPECT_EQ(st->epoch_end(2).train_loss(), st->train_loss());
  // The finished job's session released its variables on every task.
  EXPECT_TRUE(cluster_->worker(kPs)->VariableNames().empty());
  EXPECT_TRUE(cluster_->worker(kW0)->VariableNames().empty());

  // The same job in one process gives the same figures.
  auto local = LocalTrainer::Create(job);
  ASSERT_TRUE(local.ok()) << local.status();
  auto want = (*local)->Train();
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(st->step(), want->steps);
  EXPECT_EQ(st->epoch(), want->epochs);
  EXPECT_NEAR(st->train_loss(), want->train_loss, 1e-5);
  EXPECT_NEAR(st->test_accuracy(), want->test_accuracy, 1e-9);
  EXPECT_NEAR(st->test_loss(), want->test_loss, 1e-5);

  // Listed, and gettable by id.
  std::vector<JobStatus> all = jm->List();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].job_id(), *id);
  EXPECT_EQ(jm->Get(*id)->state(), SUCCEEDED);
}

TEST_F(JobManagerTest, InvalidJobsAreRejectedAtSubmit) {
  auto jm = Manager();
  JobSpec no_batch = MlpJob();
  no_batch.set_batch_size(0);
  auto s = jm->Submit(no_batch);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "batch_size")) << s.status();

  JobSpec bad_layer = MlpJob();
  bad_layer.mutable_model()->mutable_layer(1)->mutable_dense()->set_units(0);
  s = jm->Submit(bad_layer);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "layer")) << s.status();

  JobSpec many_steps = MlpJob();
  many_steps.mutable_strategy()->set_steps_per_execution(4);
  s = jm->Submit(many_steps);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "steps_per_execution")) << s.status();

  JobSpec k_of_n_steps = MlpJob();
  k_of_n_steps.mutable_strategy()->set_kind(StrategySpec::PARAMETER_SERVER);
  k_of_n_steps.mutable_strategy()->set_sync(true);
  k_of_n_steps.mutable_strategy()->set_replicas_to_aggregate(1);
  k_of_n_steps.mutable_strategy()->set_steps_per_execution(4);
  s = jm->Submit(k_of_n_steps);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "replicas_to_aggregate 1")) << s.status();

  EXPECT_TRUE(jm->List().empty());
  EXPECT_EQ(jm->Get("job-404").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(jm->Cancel("job-404").code(), absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, CancelStopsARunningJob) {
  auto jm = Manager(absl::Milliseconds(1));
  absl::Notification running;
  auto id = jm->Submit(MlpJob(/*epochs=*/100000));
  ASSERT_TRUE(id.ok()) << id.status();
  auto watch = jm->Watch(*id, [&](const JobStatus& s) {
    if (s.state() == RUNNING && s.step() > 0 && !running.HasBeenNotified()) running.Notify();
  });
  ASSERT_TRUE(watch.ok());
  ASSERT_TRUE(running.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(jm->Cancel(*id).ok());
  auto st = jm->Wait(*id, absl::Seconds(60));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), CANCELLED);
  EXPECT_LT(st->step(), st->total_steps());
  EXPECT_EQ(jm->Cancel(*id).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(JobManagerTest, WatchSeesRunningThenTheTerminalState) {
  // The job cannot get past creating its session until the gate opens, so
  // the watch starts while it is PENDING or RUNNING. A long interval: only
  // changes of state are published.
  GatedWorkers gated(cluster_->workers());
  JobManager manager(JobManagerOptions{&gated, nullptr, absl::Hours(1)});
  JobManager* jm = &manager;
  absl::Mutex mu;
  std::vector<JobStatus> seen;
  auto id = jm->Submit(MlpJob(/*epochs=*/2));
  ASSERT_TRUE(id.ok());
  auto watch = jm->Watch(*id, [&](const JobStatus& s) {
    absl::MutexLock lock(&mu);
    seen.push_back(s);
  });
  ASSERT_TRUE(watch.ok());
  gated.Open();
  ASSERT_EQ(jm->Wait(*id, absl::Seconds(60))->state(), SUCCEEDED);
  watch->reset();
  absl::MutexLock lock(&mu);
  ASSERT_GE(seen.size(), 2u);
  ASSERT_LE(seen.size(), 3u);  // [PENDING,] RUNNING, SUCCEEDED
  EXPECT_EQ(seen[seen.size() - 2].state(), RUNNING);
  EXPECT_EQ(seen.back().state(), SUCCEEDED);
  EXPECT_GT(seen.back().test_accuracy(), 0.5);
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GT(seen[i].state(), seen[i - 1].state()) << i;

  // Watching an ended job gives its final status once.
  int calls = 0;
  auto late = jm->Watch(*id, [&](const JobStatus& s) {
    ++calls;
    EXPECT_EQ(s.state(), SUCCEEDED);
  });
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(jm->Watch("job-404", [](const JobStatus&) {}).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, AKernelErrorFailsTheJobNamingTaskAndNode) {
  // Two classes in the graph, three in the data: the loss kernel rejects label 2.
  auto jm = Manager();
  auto id = jm->Submit(GraphJobWithVariablesOnPs(/*num_classes=*/2));
  ASSERT_TRUE(id.ok()) << id.status();
  auto st = jm->Wait(*id, absl::Seconds(60));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state(), FAILED);
  EXPECT_TRUE(absl::StrContains(st->error(), "task /job:worker/task:0: ")) << st->error();
  EXPECT_TRUE(absl::StrContains(st->error(), "(SparseSoftmaxCrossEntropyWithLogits)")) << st->error();
  EXPECT_TRUE(absl::StrContains(st->error(), "outside the valid range")) << st->error();
}

TEST_F(JobManagerTest, ShutdownCancelsRunningJobsAndRefusesNewOnes) {
  auto jm = Manager();
  auto id = jm->Submit(MlpJob(/*epochs=*/100000));
  ASSERT_TRUE(id.ok());
  jm->Shutdown();
  EXPECT_EQ(jm->Get(*id)->state(), CANCELLED);
  EXPECT_EQ(jm->Submit(MlpJob()).status().code(), absl::StatusCode::kUnavailable);
}

// On a master with a checkpoint root, a job's checkpoint directories must lie
// inside it, and must not be another user's (their OWNER file). Refused jobs
// are not created.
TEST_F(JobManagerTest, CheckpointDirectoriesAreConfinedToTheRootAndToTheirOwner) {
  auto root = ConfinedRoot::Open(TempPath(absl::StrCat("ckroot-", ::getpid())));
  ASSERT_TRUE(root.ok()) << root.status();
  const std::string shared = JoinPath(root->path(), "shared");
  ASSERT_TRUE(CreatePrivateDirs(shared).ok());
  WriteFile(JoinPath(shared, "OWNER"), "alice\n");
  JobManagerOptions o{cluster_->workers(), nullptr, absl::Seconds(1)};
  o.checkpoint_root = *root;
  JobManager jm(o);
  auto job = [](const std::string& dir, const std::string& resume_from = "") {
    JobSpec spec = MlpJob(/*epochs=*/100000);
    spec.mutable_strategy()->set_kind(StrategySpec::PARAMETER_SERVER);
    spec.mutable_checkpoint()->set_dir(dir);
    spec.mutable_checkpoint()->set_resume_from(resume_from);
    return spec;
  };

  // Outside the root: INVALID_ARGUMENT naming the field, the path and the root.
  auto id = jm.Submit(job("/etc/x"), "bob");
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << id.status();
  EXPECT_EQ(id.status().message(),
            absl::StrCat("job: checkpoint.dir '/etc/x' is outside the checkpoint root ", root->path()));
  id = jm.Submit(job("mine", "/etc/y"), "bob");
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << id.status();
  EXPECT_TRUE(absl::StrContains(id.status().message(), "checkpoint.resume_from '/etc/y' is outside")) << id.status();
  for (const std::string& bad : {std::string("../x"), std::string("mine/../../x"), root->path()}) {
    id = jm.Submit(job(bad), "bob");
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << bad << ": " << id.status();
  }

  // Alice's directory, named relatively or absolutely, as dir or resume_from.
  for (const JobSpec& spec : {job("shared"), job(shared), job("bobs", "shared")}) {
    id = jm.Submit(spec, "bob");
    EXPECT_EQ(id.status().code(), absl::StatusCode::kPermissionDenied) << id.status();
    EXPECT_TRUE(absl::StrContains(id.status().message(),
                                  absl::StrCat("checkpoint directory ", shared, " belongs to user alice")))
        << id.status();
  }
  EXPECT_TRUE(jm.List().empty());

  // Her own job may use it (relative to the root); it is cancelled at once.
  id = jm.Submit(job("shared"), "alice");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_TRUE(jm.Cancel(*id).ok());
  auto st = jm.Wait(*id, absl::Seconds(60));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->owner(), "alice");
}

// The queue: with one runner, a second job waits PENDING while the first
// runs (held at the gate), and runs only once the first has ended.
class JobQueueTest : public JobManagerTest {
 protected:
  // A manager over `workers` with one runner and `max_queued` waiting slots.
  std::unique_ptr<JobManager> QueueManager(WorkerCacheInterface* workers, int max_queued = 256) {
    JobManagerOptions o{workers, nullptr, absl::Hours(1)};
    o.max_running_jobs = 1;
    o.max_queued_jobs = max_queued;
    return std::make_unique<JobManager>(o);
  }
  static ::testing::AssertionResult AwaitState(JobManager* jm, const std::string& id, JobState want) {
    return weft::testing::WaitUntil(weft::testing::kWaitTimeout, absl::StrCat(id, " to be ", JobState_Name(want)),
                                    [&]() -> absl::StatusOr<bool> {
                                      ASSIGN_OR_RETURN(JobStatus s, jm->Get(id));
                                      return s.state() == want;
                                    });
  }
};

// What the watchers saw, in the order they saw it: (job id, state).
struct StateLog {
  absl::Mutex mu;
  std::vector<std::pair<std::string, JobState>> seen ABSL_GUARDED_BY(mu);

  std::function<void(const JobStatus&)> Recorder() {
    return [this](const JobStatus& s) {
      absl::MutexLock lock(&mu);
      if (seen.empty() || seen.back() != std::make_pair(s.job_id(), s.state())) seen.emplace_back(s.job_id(), s.state());
    };
  }
  // Where (id, state) was first seen; -1 if never.
  int IndexOf(const std::string& id, JobState state) {
    absl::MutexLock lock(&mu);
    for (size_t i = 0; i < seen.size(); ++i) {
      if (seen[i].first == id && seen[i].second == state) return static_cast<int>(i);
    }
    return -1;
  }
};

TEST_F(JobQueueTest, ASecondJobWaitsPendingUntilTheFirstEnds) {
  GatedWorkers gated(cluster_->workers());
  auto jm = QueueManager(&gated);
  StateLog log;
  auto first = jm->Submit(MlpJob(/*epochs=*/1));
  ASSERT_TRUE(first.ok()) << first.status();
  auto watch_first = jm->Watch(*first, log.Recorder());
  ASSERT_TRUE(watch_first.ok());
  ASSERT_TRUE(AwaitState(jm.get(), *first, RUNNING));  // held at the gate
  auto second = jm->Submit(MlpJob(/*epochs=*/1));
  ASSERT_TRUE(second.ok()) << second.status();
  auto watch_second = jm->Watch(*second, log.Recorder());
  ASSERT_TRUE(watch_second.ok());
  EXPECT_EQ(jm->Get(*second)->state(), PENDING);
  EXPECT_EQ(jm->List().back().state(), PENDING);

  gated.Open();
  auto st = jm->Wait(*second, absl::Seconds(120));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), SUCCEEDED) << st->error();
  EXPECT_EQ(jm->Get(*first)->state(), SUCCEEDED);
  // The second started only after the first had ended.
  const int first_end = log.IndexOf(*first, SUCCEEDED);
  const int second_start = log.IndexOf(*second, RUNNING);
  ASSERT_GE(first_end, 0);
  ASSERT_GE(second_start, 0);
  EXPECT_GT(second_start, first_end);
  const int second_pending = log.IndexOf(*second, PENDING);  // seen when its watch began
  EXPECT_GE(second_pending, 0);
  EXPECT_LT(second_pending, first_end);
}

TEST_F(JobQueueTest, CancellingAQueuedJobEndsItWithoutRunning) {
  GatedWorkers gated(cluster_->workers());
  auto jm = QueueManager(&gated, /*max_queued=*/1);
  auto first = jm->Submit(MlpJob(/*epochs=*/1));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(AwaitState(jm.get(), *first, RUNNING));
  auto queued = jm->Submit(MlpJob(/*epochs=*/1));
  ASSERT_TRUE(queued.ok()) << queued.status();
  StateLog log;
  auto watch = jm->Watch(*queued, log.Recorder());
  ASSERT_TRUE(watch.ok());

  ASSERT_TRUE(jm->Cancel(*queued).ok());
  // Ended by Cancel itself: no wait for the runner, which is still held.
  auto st = jm->Wait(*queued, absl::ZeroDuration());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), CANCELLED);
  EXPECT_EQ(st->step(), 0);
  EXPECT_EQ(jm->Cancel(*queued).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(jm->Get(*first)->state(), RUNNING);
  // Its slot in the queue is free again.
  auto next = jm->Submit(MlpJob(/*epochs=*/1));
  ASSERT_TRUE(next.ok()) << next.status();

  gated.Open();
  ASSERT_EQ(jm->Wait(*next, absl::Seconds(120))->state(), SUCCEEDED);
  EXPECT_EQ(jm->Get(*first)->state(), SUCCEEDED);
  EXPECT_EQ(jm->Get(*queued)->state(), CANCELLED);
  watch->reset();
  EXPECT_EQ(log.IndexOf(*queued, RUNNING), -1);
  EXPECT_GE(log.IndexOf(*queued, CANCELLED), 0);
}

TEST_F(JobQueueTest, AFullQueueRefusesSubmitsAndDisturbsNothing) {
  GatedWorkers gated(cluster_->workers());
  auto jm = QueueManager(&gated, /*max_queued=*/1);
  auto running = jm->Submit(MlpJob(/*epochs=*/1));
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_TRUE(AwaitState(jm.get(), *running, RUNNING));
  auto waiting = jm->Submit(MlpJob(/*epochs=*/1));
  ASSERT_TRUE(waiting.ok()) << waiting.status();

  auto refused = jm->Submit(MlpJob(/*epochs=*/1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "--max_queued_jobs=1")) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "1 job(s) wait")) << refused.status();
  // Not created, and the others are as they were.
  EXPECT_EQ(jm->List().size(), 2u);
  EXPECT_EQ(jm->Get(*running)->state(), RUNNING);
  EXPECT_EQ(jm->Get(*waiting)->state(), PENDING);

  gated.Open();
  ASSERT_EQ(jm->Wait(*running, absl::Seconds(120))->state(), SUCCEEDED);
  // The runner is free once the first job's end is seen: the queued job
  // takes it, and the queue has room again.
  auto later = jm->Submit(MlpJob(/*epochs=*/1));
  ASSERT_TRUE(later.ok()) << later.status();
  ASSERT_EQ(jm->Wait(*waiting, absl::Seconds(120))->state(), SUCCEEDED);
  ASSERT_EQ(jm->Wait(*later, absl::Seconds(120))->state(), SUCCEEDED);
}

TEST_F(JobQueueTest, ShutdownWithQueuedJobsReturnsPromptly) {
  auto jm = QueueManager(cluster_->workers());
  auto running = jm->Submit(MlpJob(/*epochs=*/100000));
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_TRUE(AwaitState(jm.get(), *running, RUNNING));
  std::vector<std::string> queued;
  for (int i = 0; i < 3; ++i) {
    auto id = jm->Submit(MlpJob(/*epochs=*/100000));
    ASSERT_TRUE(id.ok()) << id.status();
    queued.push_back(*id);
  }
  absl::Notification stopped;
  std::thread stopper([&] {
    jm->Shutdown();
    stopped.Notify();
  });
  // A hang detector: a queue that ran its jobs first would take hours.
  if (!stopped.WaitForNotificationWithTimeout(weft::testing::kWaitTimeout)) {
    stopper.detach();
    (void)jm.release();  // still in use by the stuck Shutdown
    FAIL() << "Shutdown did not return within " << weft::testing::kWaitTimeout << " with 3 queued jobs";
  }
  stopper.join();
  EXPECT_EQ(jm->Get(*running)->state(), CANCELLED);
  for (const std::string& id : queued) {
    auto st = jm->Wait(id, absl::ZeroDuration());
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->state(), CANCELLED) << id;
    EXPECT_EQ(st->step(), 0) << id;
  }
  EXPECT_EQ(jm->Submit(MlpJob()).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace master
}  // namespace weft
