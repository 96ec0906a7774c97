#include "master/job_summaries.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "common/confined_root.h"
#include "common/env.h"
#include "common/fault_injecting_env.h"
#include "google/protobuf/text_format.h"
#include "master/gated_workers.h"
#include "master/in_process_cluster.h"
#include "master/job_manager.h"
#include "proto/event.pb.h"
#include "runtime/data/test_files.h"
#include "runtime/data/tfrecord.h"
#include "runtime/summary_writer.h"

namespace weft {
namespace master {
namespace {

using data::testing::IdxBytes;
using data::testing::TempPath;
using data::testing::WriteFile;

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

// 240 examples in batches of 16: 15 steps an epoch.
JobSpec MlpJob(const std::string& extra) {
  JobSpec job;
  const std::string text = absl::StrCat(R"(name: "tiny"
      model { input_shape: [16] num_classes: 3
              layer { dense { units: 16 activation: RELU } }
              layer { dense { units: 3 } } }
      dataset { scale: 255 train_images: "train-images" train_labels: "train-labels"
                test_images: "test-images" test_labels: "test-labels" }
      optimizer { adam { learning_rate: 0.01 } }
      batch_size: 16 seed: 1 intra_op_threads: 1 )", extra);
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &job)) << text;
  job.mutable_dataset()->set_dir(DataDir());
  return job;
}

std::string FreshRoot(const std::string& name) {
  static int counter = 0;
  return TempPath(absl::StrCat("summaries-", name, "-", ::getpid(), "-", counter++));
}

// The event files of a run directory, each file's events in order; checks
// the framing and CRCs of every record (TFRecordReader).
std::vector<std::vector<Event>> ReadRun(const std::string& run) {
  std::vector<std::vector<Event>> files;
  absl::StatusOr<std::vector<std::string>> names = Env::Default()->ListDirectory(run);
  EXPECT_TRUE(names.ok()) << names.status();
  for (const std::string& name : names.value_or(std::vector<std::string>{})) {
    EXPECT_TRUE(absl::StartsWith(name, "events.out.tfevents.")) << name;
    auto reader = data::TFRecordReader::Open(JoinPath(run, name));
    EXPECT_TRUE(reader.ok()) << reader.status();
    if (!reader.ok()) continue;
    std::vector<Event>& events = files.emplace_back();
    std::string record;
    for (;;) {
      absl::StatusOr<bool> more = (*reader)->ReadRecord(&record);
      EXPECT_TRUE(more.ok()) << more.status();
      if (!more.ok() || !*more) break;
      EXPECT_TRUE(events.emplace_back().ParseFromString(record));
    }
    EXPECT_FALSE(events.empty());
    if (!events.empty()) {
      EXPECT_EQ(events[0].file_version(), "brain.Event:2") << name;
    }
  }
  return files;
}

// step -> value of `tag` over `events`; fails the test on a step given twice.
std::map<int64_t, float> Scalars(const std::vector<Event>& events, const std::string& tag) {
  std::map<int64_t, float> out;
  for (const Event& e : events) {
    for (const Summary::Value& v : e.summary().value()) {
      if (v.tag() != tag) continue;
      EXPECT_EQ(out.count(e.step()), 0u) << tag << " twice at step " << e.step();
      out[e.step()] = v.simple_value();
    }
  }
  return out;
}

std::vector<int64_t> Steps(const std::map<int64_t, float>& scalars) {
  std::vector<int64_t> steps;
  for (const auto& [step, value] : scalars) steps.push_back(step);
  return steps;
}

class JobSummariesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = InProcessCluster::Create({"/job:ps/task:0", "/job:worker/task:0"});
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
    auto root = ConfinedRoot::Open(FreshRoot("root"));
    ASSERT_TRUE(root.ok()) << root.status();
    root_ = *std::move(root);
  }

  // Runs `job` through a JobManager whose checkpoint root is root_,
  // publishing every progress update; `*losses` gets the loss the job
  // reported at each step. Returns the final status.
  JobStatus RunJob(const JobSpec& job, std::map<int64_t, double>* losses) {
    GatedWorkers gated(cluster_->workers());  // holds the job until the watch is on
    JobManagerOptions o{&gated, nullptr, absl::ZeroDuration()};
    o.checkpoint_root = *root_;
    JobManager jm(o);
    auto id = jm.Submit(job, "alice");
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return JobStatus();
    absl::Mutex mu;
    auto watch = jm.Watch(*id, [&](const JobStatus& s) {
      absl::MutexLock lock(&mu);
      if (s.state() == RUNNING && s.step() > 0) (*losses)[s.step()] = s.loss();
    });
    EXPECT_TRUE(watch.ok()) << watch.status();
    gated.Open();
    auto st = jm.Wait(*id, absl::Seconds(120));
    EXPECT_TRUE(st.ok()) << st.status();
    watch->reset();
    return st.value_or(JobStatus());
  }

  std::unique_ptr<InProcessCluster> cluster_;
  std::optional<ConfinedRoot> root_;
};

// The end-to-end check: a job run by the master writes one run whose
// train/loss is the loss it reported at the same steps, and whose eval
// scalars are its evaluations.
TEST_F(JobSummariesTest, AJobsEventFileHoldsTheLossesItReported) {
  std::map<int64_t, double> losses;
  const JobStatus st =
      RunJob(MlpJob("epochs: 3 eval { every_epochs: 1 } summary { dir: 'tb/mlp' every_steps: 5 }"), &losses);
  ASSERT_EQ(st.state(), SUCCEEDED) << st.error();
  ASSERT_EQ(st.step(), 45);
  const std::string run = JoinPath(root_->path(), JoinPath("tb/mlp", st.job_id()));
  const std::vector<std::vector<Event>> files = ReadRun(run);
  ASSERT_EQ(files.size(), 1u);
  const std::vector<Event>& events = files[0];

  const std::map<int64_t, float> loss = Scalars(events, "train/loss");
  EXPECT_EQ(Steps(loss), (std::vector<int64_t>{5, 10, 15, 20, 25, 30, 35, 40, 45}));
  for (const auto& [step, value] : loss) {
    ASSERT_EQ(losses.count(step), 1u) << "the job reported no loss at step " << step;
    EXPECT_EQ(value, static_cast<float>(losses[step])) << "step " << step;
  }
  EXPECT_EQ(loss.at(45), static_cast<float>(st.loss()));
  for (const auto& [step, lr] : Scalars(events, "train/learning_rate")) EXPECT_EQ(lr, 0.01f) << step;
  EXPECT_EQ(Scalars(events, "train/learning_rate").size(), loss.size());
  for (const auto& [step, v] : Scalars(events, "train/samples_per_second")) EXPECT_GT(v, 0) << step;
  // Step time at every summary (over steps 2-5 in the first: step 1's time
  // includes the start).
  const std::map<int64_t, float> step_time = Scalars(events, "train/step_time_seconds");
  EXPECT_EQ(Steps(step_time), Steps(loss));
  for (const auto& [step, v] : step_time) EXPECT_GT(v, 0) << step;
  EXPECT_TRUE(Scalars(events, "train/accuracy").empty());

  // An evaluation after every epoch; the last is the job's test_accuracy,
  // and the final eval/loss its test_loss.
  const std::map<int64_t, float> accuracy = Scalars(events, "eval/accuracy");
  EXPECT_EQ(Steps(accuracy), (std::vector<int64_t>{15, 30, 45}));
  EXPECT_EQ(accuracy.at(45), static_cast<float>(st.test_accuracy()));
  EXPECT_GT(accuracy.at(45), 0.9f);
  const std::map<int64_t, float> eval_loss = Scalars(events, "eval/loss");
  EXPECT_EQ(Steps(eval_loss), (std::vector<int64_t>{45}));
  EXPECT_EQ(eval_loss.at(45), static_cast<float>(st.test_loss()));

  // Private, like the checkpoints beside it.
  struct stat s;
  ASSERT_EQ(::stat(run.c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 0777, 0700u);
}

// Several steps per update (a strategy's steps_per_execution): a summary
// whenever a multiple of every_steps is passed; evaluation only at the end.
TEST_F(JobSummariesTest, SummariesFollowStepsRunSeveralAtATime) {
  std::map<int64_t, double> losses;
  const JobStatus st = RunJob(MlpJob("steps: 20 strategy { kind: PARAMETER_SERVER sync: true "
                                     "steps_per_execution: 4 } summary { dir: 'ps' every_steps: 6 }"),
                              &losses);
  ASSERT_EQ(st.state(), SUCCEEDED) << st.error();
  const std::vector<std::vector<Event>> files = ReadRun(JoinPath(root_->path(), JoinPath("ps", st.job_id())));
  ASSERT_EQ(files.size(), 1u);
  // Updates at 4, 8, 12, 15 (the epoch's end), 19, 20: a summary where a
  // multiple of 6 was reached or passed, and at the last step.
  const std::map<int64_t, float> loss = Scalars(files[0], "train/loss");
  EXPECT_EQ(Steps(loss), (std::vector<int64_t>{8, 12, 19, 20}));
  for (const auto& [step, value] : loss) {
    ASSERT_EQ(losses.count(step), 1u) << step;
    EXPECT_EQ(value, static_cast<float>(losses[step])) << step;
  }
  const std::map<int64_t, float> accuracy = Scalars(files[0], "eval/accuracy");
  EXPECT_EQ(Steps(accuracy), (std::vector<int64_t>{20}));
  EXPECT_EQ(accuracy.at(20), static_cast<float>(st.test_accuracy()));
}

// summary.dir is confined to the checkpoint root like checkpoint.dir:
// refused at submit, with the field and the reason, and no job created.
TEST_F(JobSummariesTest, ASummaryDirEscapingTheRootIsRefusedAtSubmit) {
  const std::string outside = FreshRoot("outside");
  ASSERT_TRUE(CreatePrivateDirs(outside).ok());
  ASSERT_EQ(::symlink(outside.c_str(), JoinPath(root_->path(), "link").c_str()), 0) << errno;
  WriteFile(JoinPath(root_->path(), "file"), "x");
  const std::string shared = JoinPath(root_->path(), "shared");
  ASSERT_TRUE(CreatePrivateDirs(shared).ok());
  WriteFile(JoinPath(shared, "OWNER"), "alice\n");
  JobManagerOptions o{cluster_->workers(), nullptr, absl::Seconds(1)};
  o.checkpoint_root = *root_;
  JobManager jm(o);
  auto job = [](const std::string& dir) {
    return MlpJob(absl::StrCat("epochs: 100000 summary { dir: '", dir, "' }"));
  };
  struct Case {
    std::string dir;
    absl::StatusCode code;
    std::string message;  // contained in the error
  } cases[] = {
      {"../x", absl::StatusCode::kInvalidArgument, "job: summary.dir '../x' must not contain '..'"},
      {"tb/../../x", absl::StatusCode::kInvalidArgument, "must not contain '..'"},
      {"/etc/x", absl::StatusCode::kInvalidArgument,
       absl::StrCat("job: summary.dir '/etc/x' is outside the checkpoint root ", root_->path())},
      {outside, absl::StatusCode::kInvalidArgument, "is outside the checkpoint root"},
      {root_->path(), absl::StatusCode::kInvalidArgument, "names the root"},
      {"link", absl::StatusCode::kPermissionDenied, "is a symbolic link; links are not followed below the root"},
      {"link/runs", absl::StatusCode::kPermissionDenied, "is a symbolic link"},
      {JoinPath(root_->path(), "link/runs"), absl::StatusCode::kPermissionDenied, "is a symbolic link"},
      {"file/runs", absl::StatusCode::kFailedPrecondition, "not a directory"},
      {"shared", absl::StatusCode::kPermissionDenied, "belongs to user alice"},
  };
  for (const Case& c : cases) {
    auto id = jm.Submit(job(c.dir), "bob");
    EXPECT_EQ(id.status().code(), c.code) << c.dir << ": " << id.status();
    EXPECT_TRUE(absl::StrContains(id.status().message(), c.message)) << c.dir << ": " << id.status();
    EXPECT_TRUE(absl::StartsWith(id.status().message(), "job: summary.dir")) << id.status();
  }
  EXPECT_TRUE(jm.List().empty());
  ASSERT_TRUE(Env::Default()->ListDirectory(outside).ok());
  EXPECT_TRUE(Env::Default()->ListDirectory(outside)->empty());

  // Inside the root, missing directories included: accepted (and cancelled).
  for (const std::string& dir : {std::string("tb/new/deeper"), JoinPath(root_->path(), "tb2")}) {
    auto id = jm.Submit(job(dir), "bob");
    ASSERT_TRUE(id.ok()) << dir << ": " << id.status();
    EXPECT_TRUE(jm.Cancel(*id).ok());
    EXPECT_TRUE(jm.Wait(*id, absl::Seconds(60)).ok());
  }
}

// A link swapped in after the submit is refused when the job starts: the
// run directory is reached by the same no-link walk.
TEST_F(JobSummariesTest, OpenRefusesALinkMadeAfterSubmit) {
  const std::string outside = FreshRoot("outside");
  ASSERT_TRUE(CreatePrivateDirs(outside).ok());
  const JobSpec job = MlpJob("epochs: 1 summary { dir: 'late' }");
  ASSERT_TRUE(CheckSummaryPolicy(*root_, job, "bob").ok());
  ASSERT_EQ(::symlink(outside.c_str(), JoinPath(root_->path(), "late").c_str()), 0) << errno;
  auto opened = JobSummaries::Open(job, "job-1-00", root_, Env::Default());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kPermissionDenied) << opened.status();
  EXPECT_TRUE(absl::StrContains(opened.status().message(), "symbolic link")) << opened.status();
  EXPECT_TRUE(Env::Default()->ListDirectory(outside)->empty());
  // The job manager's form writes nothing and does not fail.
  auto none = JobSummaries::OpenOrLog(job, "job-1-00", root_, Env::Default());
  ASSERT_NE(none, nullptr);
  EXPECT_EQ(none->path(), "");
  none->OnProgress(TrainProgress{});
  none->OnResult(TrainResult{});
}

TrainProgress Progress(int64_t step, double loss, int64_t total = 1000) {
  TrainProgress p;
  p.step = step;
  p.total_steps = total;
  p.loss = loss;
  p.samples_per_second = 100;
  return p;
}

TEST_F(JobSummariesTest, DefaultsToEvery100StepsAndEndsACancelledRunWithItsLastStep) {
  JobSpec job = MlpJob("epochs: 1 summary { dir: 'd' }");
  auto s = JobSummaries::Open(job, "job-2-00", root_, Env::Default());
  ASSERT_TRUE(s.ok() && *s != nullptr) << s.status();
  for (int64_t step = 1; step <= 250; ++step) (*s)->OnProgress(Progress(step, step / 1000.0));
  TrainResult r;
  r.state = CANCELLED;
  r.steps = 250;
  r.train_loss = 0.25;
  r.test_accuracy = 0.5;  // an earlier evaluation's: not written again
  (*s)->OnResult(r);
  const std::vector<std::vector<Event>> files = ReadRun(JoinPath(root_->path(), "d/job-2-00"));
  ASSERT_EQ(files.size(), 1u);
  const std::map<int64_t, float> loss = Scalars(files[0], "train/loss");
  EXPECT_EQ(Steps(loss), (std::vector<int64_t>{100, 200, 250}));
  EXPECT_EQ(loss.at(250), 0.25f);
  EXPECT_TRUE(Scalars(files[0], "eval/accuracy").empty());
  EXPECT_EQ(Scalars(files[0], "train/learning_rate").at(100), 0.01f);
}

// With a schedule, the chart is the rate of the step's update.
TEST_F(JobSummariesTest, AScheduledLearningRateIsChartedAtEachStep) {
  JobSpec job = MlpJob("steps: 300 summary { dir: 'sched' every_steps: 50 }");
  job.mutable_optimizer()->mutable_schedule()->set_warmup_steps(100);
  job.mutable_optimizer()->mutable_schedule()->mutable_cosine()->set_alpha(0.1f);  // decays over the last 200
  auto s = JobSummaries::Open(job, "job-5-00", root_, Env::Default());
  ASSERT_TRUE(s.ok() && *s != nullptr) << s.status();
  for (int64_t step = 1; step <= 300; ++step) (*s)->OnProgress(Progress(step, 1.0, 300));
  const std::vector<std::vector<Event>> files = ReadRun(JoinPath(root_->path(), "sched/job-5-00"));
  ASSERT_EQ(files.size(), 1u);
  const std::map<int64_t, float> lr = Scalars(files[0], "train/learning_rate");
  ASSERT_EQ(Steps(lr), (std::vector<int64_t>{50, 100, 150, 200, 250, 300}));
  EXPECT_FLOAT_EQ(lr.at(50), 0.005f);  // half way up the warm-up
  EXPECT_FLOAT_EQ(lr.at(100), 0.01f);
  // 99 of 200 decay steps: just above the midpoint, 0.01 (0.1 + 0.9 / 2).
  EXPECT_NEAR(lr.at(200), 0.01 * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 99 / 200))), 1e-8);
  EXPECT_GT(lr.at(250), lr.at(300));
  EXPECT_GT(lr.at(300), 0.001f);
}

// A raw graph model's learning rate is inside its graph: not written.
TEST_F(JobSummariesTest, ARawGraphHasNoLearningRateAndNoRootMeansThePathAsGiven) {
  JobSpec job = MlpJob("epochs: 1");
  job.mutable_graph();  // replaces the Sequential model
  job.mutable_summary()->set_dir(FreshRoot("plain"));
  job.mutable_summary()->set_every_steps(1);
  auto s = JobSummaries::Open(job, "job-3-00", std::nullopt, Env::Default());
  ASSERT_TRUE(s.ok() && *s != nullptr) << s.status();
  EXPECT_TRUE(absl::StartsWith((*s)->path(), JoinPath(job.summary().dir(), "job-3-00/events.out.tfevents.")))
      << (*s)->path();
  (*s)->OnProgress(Progress(1, 0.5));
  (*s)->OnResult(absl::InternalError("the job failed"));
  const std::vector<std::vector<Event>> files = ReadRun(JoinPath(job.summary().dir(), "job-3-00"));
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(Steps(Scalars(files[0], "train/loss")), (std::vector<int64_t>{1}));
  EXPECT_TRUE(Scalars(files[0], "train/learning_rate").empty());

  // No policy: nothing.
  auto none = JobSummaries::Open(MlpJob("epochs: 1"), "job-4-00", root_, Env::Default());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
}

// A failed write stops the summaries, not the job: later updates are no-ops.
TEST_F(JobSummariesTest, AFailedWriteStopsTheSummaries) {
  FaultInjectingEnv env(Env::Default());
  auto s = JobSummaries::Open(MlpJob("epochs: 1 summary { dir: 'full' every_steps: 1 }"), "job-5-00", root_, &env);
  ASSERT_TRUE(s.ok() && *s != nullptr) << s.status();
  FaultInjectingEnv::Faults f;
  f.fail_append_at = 1;
  f.append_errno = ENOSPC;
  env.SetFaults(f);
  (*s)->OnProgress(Progress(1, 0.5));
  EXPECT_EQ((*s)->path(), "");
  env.ClearFaults();
  (*s)->OnProgress(Progress(2, 0.5));
  (*s)->OnResult(TrainResult{});
  EXPECT_EQ(env.appends(), 0);
}

}  // namespace
}  // namespace master
}  // namespace weft
