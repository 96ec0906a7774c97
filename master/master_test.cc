// The Master's handlers called directly, as its gRPC adapter calls them:
// Reset, with callers of each kind, a step in flight and a job running.
#include "master/master.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/tensor_proto_coding.h"
#include "google/protobuf/text_format.h"
#include "graph/builder.h"
#include "gtest/gtest.h"
#include "master/in_process_cluster.h"
#include "runtime/data/test_files.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace master {
namespace {

using data::testing::IdxBytes;
using data::testing::TempPath;
using data::testing::WriteFile;
using ::weft::testing::RandomTensor;

constexpr char kPs[] = "/job:ps/task:0";
constexpr char kW0[] = "/job:worker/task:0";
constexpr absl::Duration kWait = absl::Seconds(60);  // for what happens at once

// Forwards to the in-process tasks; while `hold` is set, worker 0's RunGraph
// waits until an AbortStep names its step, and then fails with the abort's
// status, as a step whose _Recv waits for a peer does.
class HoldingWorkers final : public WorkerCacheInterface {
 public:
  explicit HoldingWorkers(WorkerCacheInterface* inner) : inner_(inner) {}

  void SetHold(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_ = hold;
  }
  bool AwaitHeld(int n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return static_cast<int>(held_.size()) >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

  std::vector<std::string> ListTasks() const override { return inner_->ListTasks(); }
  WorkerInterface* GetOrCreateWorker(const std::string& task) override {
    WorkerInterface* w = inner_->GetOrCreateWorker(task);
    if (w == nullptr || task != kW0) return w;
    absl::MutexLock lock(&mu_);
    if (w0_ == nullptr) w0_ = std::make_unique<Holding>(w, this);
    return w0_.get();
  }

 private:
  class Holding final : public WorkerInterface {
   public:
    Holding(WorkerInterface* w, HoldingWorkers* owner) : w_(w), owner_(owner) {}
    const std::string& task() const override { return w_->task(); }
    void GetStatusAsync(const GetStatusRequest* q, GetStatusResponse* r, StatusCallback done) override {
      w_->GetStatusAsync(q, r, std::move(done));
    }
    void RegisterGraphAsync(const RegisterGraphRequest* q, RegisterGraphResponse* r, StatusCallback done) override {
      w_->RegisterGraphAsync(q, r, std::move(done));
    }
    void DeregisterGraphAsync(const DeregisterGraphRequest* q, DeregisterGraphResponse* r,
                              StatusCallback done) override {
      w_->DeregisterGraphAsync(q, r, std::move(done));
    }
    void RunGraphAsync(const RunGraphRequest* q, RunGraphResponse* r, absl::Duration t, StatusCallback done) override {
      {
        absl::MutexLock lock(&owner_->mu_);
        if (owner_->hold_) {
          owner_->held_[q->step_id()] = std::move(done);
          return;
        }
      }
      w_->RunGraphAsync(q, r, t, std::move(done));
    }
    void AbortStepAsync(const AbortStepRequest* q, AbortStepResponse* r, StatusCallback done) override {
      StatusCallback held;
      {
        absl::MutexLock lock(&owner_->mu_);
        auto it = owner_->held_.find(q->step_id());
        if (it != owner_->held_.end()) {
          held = std::move(it->second);
          owner_->held_.erase(it);
        }
      }
      if (held) held(absl::Status(static_cast<absl::StatusCode>(q->code()), q->message()));
      w_->AbortStepAsync(q, r, std::move(done));
    }
    void CleanupStepAsync(const CleanupStepRequest* q, CleanupStepResponse* r, StatusCallback done) override {
      w_->CleanupStepAsync(q, r, std::move(done));
    }
    void ResetContainersAsync(const ResetContainersRequest* q, ResetContainersResponse* r,
                              StatusCallback done) override {
      w_->ResetContainersAsync(q, r, std::move(done));
    }

   private:
    WorkerInterface* const w_;
    HoldingWorkers* const owner_;
  };

  WorkerCacheInterface* const inner_;
  absl::Mutex mu_;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int64_t, StatusCallback> held_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Holding> w0_ ABSL_GUARDED_BY(mu_);
};

Caller User(const std::string& name, bool admin = false) {
  Caller c;
  c.kind = Caller::Kind::kUser;
  c.name = name;
  c.admin = admin;
  c.credential = "token";
  return c;
}

// x (fed, float32 [?,3]) on worker 0 times w (ps): y.
GraphDef FedGraph() {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {-1, 3}, "x");
  b.set_device(kPs);
  Output w = b.Variable("w", DType::kFloat32, {3, 2}, "ones", 1);
  b.set_device("");
  b.Op("MatMul", {x, w}, {}, "y");
  EXPECT_TRUE(b.status().ok()) << b.status();
  return g.ToGraphDef();
}

// A 2-class dataset of 2x2 images.
std::string DataDir() {
  static const std::string dir = [] {
    const std::string d = TempPath("");
    for (const char* split : {"train", "test"}) {
      const uint32_t n = 64;
      std::vector<uint8_t> pixels, labels;
      for (uint32_t i = 0; i < n; ++i) {
        const int c = static_cast<int>(i % 2);
        labels.push_back(static_cast<uint8_t>(c));
        for (int j = 0; j < 4; ++j) pixels.push_back(j == c ? 220 : 10);
      }
      WriteFile(absl::StrCat(d, "/", split, "-images"), IdxBytes({n, 2, 2}, pixels));
      WriteFile(absl::StrCat(d, "/", split, "-labels"), IdxBytes({n}, labels));
    }
    return d;
  }();
  return dir;
}

class MasterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = InProcessCluster::Create({kPs, kW0});
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
    holding_ = std::make_unique<HoldingWorkers>(cluster_->workers());
    MasterOptions o;
    o.workers = holding_.get();
    o.progress_interval = absl::ZeroDuration();
    master_ = std::make_unique<Master>(std::move(o));
  }
  void TearDown() override {
    holding_->SetHold(false);
    master_.reset();
  }

  // Calls a handler and waits for its answer. The request and response
  // live in shared state, so a handler that answers after the deadline
  // writes nowhere it should not.
  template <typename Req, typename Resp>
  absl::Status Call(void (Master::*handler)(const Caller&, const Req*, Resp*, StatusCallback), const Caller& caller,
                    const Req& request, Resp* response = nullptr) {
    struct State {
      Req request;
      Resp response;
      absl::Notification done;
      absl::Status status;
    };
    auto state = std::make_shared<State>();
    state->request = request;
    (master_.get()->*handler)(caller, &state->request, &state->response, [state](const absl::Status& s) {
      state->status = s;
      state->done.Notify();
    });
    if (!state->done.WaitForNotificationWithTimeout(kWait)) {
      ADD_FAILURE() << "the master did not answer within " << kWait;
      return absl::DeadlineExceededError("no answer");
    }
    if (response != nullptr) *response = state->response;
    return state->status;
  }

  std::string CreateSession(const Caller& caller) {
    CreateSessionRequest req;
    *req.mutable_graph_def() = FedGraph();
    CreateSessionResponse resp;
    absl::Status s = Call(&Master::CreateSessionAsync, caller, req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp.session_handle();
  }
  static RunStepRequest Step(const std::string& handle) {
    RunStepRequest req;
    req.set_session_handle(handle);
    NamedTensorProto* f = req.add_feed();
    f->set_name("x");
    TensorToProto(RandomTensor({2, 3}, 1), f->mutable_tensor());
    req.add_fetch("y");
    return req;
  }
  absl::Status RunStep(const Caller& caller, const std::string& handle) {
    RunStepResponse resp;
    return Call(&Master::RunStepAsync, caller, Step(handle), &resp);
  }
  absl::Status Reset(const Caller& caller) { return Call(&Master::ResetAsync, caller, ResetRequest()); }

  std::unique_ptr<InProcessCluster> cluster_;
  std::unique_ptr<HoldingWorkers> holding_;
  std::unique_ptr<Master> master_;
};

TEST_F(MasterTest, ResetNeedsAnAdminAndThenClosesEveryUsersSessions) {
  const Caller alice = User("alice"), bob = User("bob"), carol = User("carol", /*admin=*/true);
  const std::string a = CreateSession(alice), b = CreateSession(bob);
  ASSERT_TRUE(RunStep(alice, a).ok());
  ASSERT_TRUE(RunStep(bob, b).ok());

  // Neither a user nor a task may reset the master; each refusal names who asked.
  absl::Status s = Reset(bob);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_EQ(s.message(), "MasterService.Reset needs the admin role; user bob (token) does not have it");
  Caller task;
  task.kind = Caller::Kind::kCluster;
  task.name = kW0;
  task.credential = "certificate";
  s = Reset(task);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_EQ(s.message(),
            "MasterService.Reset needs the admin role; task /job:worker/task:0 (certificate) does not have it");
  // The refusals changed nothing.
  EXPECT_TRUE(RunStep(alice, a).ok());
  EXPECT_TRUE(RunStep(bob, b).ok());

  ASSERT_TRUE(Reset(carol).ok());
  for (const auto& [who, handle] : {std::pair<Caller, std::string>{alice, a}, {bob, b}}) {
    s = RunStep(who, handle);
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    EXPECT_EQ(s.message(), absl::StrCat("no session '", handle, "' (closed, reset, or never created)"));
  }
  // Their graphs are gone from the tasks too.
  EXPECT_EQ(cluster_->worker(kPs)->NumGraphs(), 0);
  EXPECT_EQ(cluster_->worker(kW0)->NumGraphs(), 0);
  // And the master takes new sessions.
  const std::string again = CreateSession(alice);
  EXPECT_TRUE(RunStep(alice, again).ok());
}

TEST_F(MasterTest, ResetAbortsAStepInFlightAndWaitsForIt) {
  const Caller alice = User("alice"), carol = User("carol", /*admin=*/true);
  const std::string a = CreateSession(alice);
  ASSERT_TRUE(RunStep(alice, a).ok());  // registered; now hold the next step on worker 0
  holding_->SetHold(true);
  struct Pending {
    RunStepRequest request;
    RunStepResponse response;
    absl::Notification done;
    absl::Status status;
  };
  auto step = std::make_shared<Pending>();
  step->request = Step(a);
  master_->RunStepAsync(alice, &step->request, &step->response, [step](const absl::Status& s) {
    step->status = s;
    step->done.Notify();
  });
  ASSERT_TRUE(holding_->AwaitHeld(1, kWait)) << "the step never reached worker 0";
  EXPECT_FALSE(step->done.HasBeenNotified());

  ASSERT_TRUE(Reset(carol).ok());
  // Reset returns once the step it aborted has ended (MasterSession::Close
  // waits for its Run); the step's callback runs just after that Run
  // returns, on the step's own thread, so it may still be on its way.
  ASSERT_TRUE(step->done.WaitForNotificationWithTimeout(kWait)) << "the aborted step never answered";
  EXPECT_EQ(step->status.code(), absl::StatusCode::kCancelled) << step->status;
  EXPECT_EQ(step->status.message(), "task /job:worker/task:0: the session was reset");
  EXPECT_EQ(RunStep(alice, a).code(), absl::StatusCode::kNotFound);
}

TEST_F(MasterTest, JobsRunOnThroughAReset) {
  JobSpec job;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"(name: "outlives-reset"
      model { input_shape: [4] num_classes: 2 layer { dense { units: 2 } } }
      dataset { train_images: "train-images" train_labels: "train-labels"
                test_images: "test-images" test_labels: "test-labels" }
      optimizer { sgd { learning_rate: 0.1 } }
      batch_size: 8 seed: 1 intra_op_threads: 1 epochs: 100000)",
                                                            &job));
  job.mutable_dataset()->set_dir(DataDir());
  const Caller alice = User("alice"), carol = User("carol", /*admin=*/true);
  SubmitJobRequest submit;
  *submit.mutable_job() = job;
  SubmitJobResponse submitted;
  ASSERT_TRUE(Call(&Master::SubmitJobAsync, alice, submit, &submitted).ok());
  const std::string id = submitted.job_id();

  absl::Mutex mu;
  JobStatus last;
  auto watch = master_->jobs()->Watch(id, [&](const JobStatus& s) {
    absl::MutexLock lock(&mu);
    last = s;
  });
  ASSERT_TRUE(watch.ok()) << watch.status();
  auto reached = [&](int64_t step) {
    absl::MutexLock lock(&mu);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return last.state() == RUNNING && last.step() >= step; };
    return mu.AwaitWithTimeout(absl::Condition(&done), kWait);
  };
  ASSERT_TRUE(reached(1)) << "the job never started";
  // An interactive session beside it, which the reset closes.
  const std::string a = CreateSession(alice);
  ASSERT_TRUE(RunStep(alice, a).ok());

  ASSERT_TRUE(Reset(carol).ok());
  int64_t at_reset = 0;
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(last.state(), RUNNING);
    at_reset = last.step();
  }
  EXPECT_TRUE(reached(at_reset + 20)) << "the job stopped training after the reset";
  EXPECT_EQ(RunStep(alice, a).code(), absl::StatusCode::kNotFound);

  CancelJobRequest cancel;
  cancel.set_job_id(id);
  ASSERT_TRUE(Call(&Master::CancelJobAsync, alice, cancel).ok());
  auto end = master_->jobs()->Wait(id, kWait);
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->state(), CANCELLED);  // not FAILED: the reset did not touch it
  EXPECT_TRUE(end->error().empty()) << end->error();
  watch->reset();
}

// The job limits reach the JobManager: with one runner and no waiting
// slot, a second job is refused with RESOURCE_EXHAUSTED naming the flag
// while the first runs, and the first goes on.
TEST_F(MasterTest, JobLimitsRefuseASubmitPastTheQueue) {
  master_.reset();
  MasterOptions o;
  o.workers = holding_.get();
  o.progress_interval = absl::ZeroDuration();
  o.max_running_jobs = 1;
  o.max_queued_jobs = 0;
  master_ = std::make_unique<Master>(std::move(o));
  JobSpec job;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"(name: "long"
      model { input_shape: [4] num_classes: 2 layer { dense { units: 2 } } }
      dataset { train_images: "train-images" train_labels: "train-labels"
                test_images: "test-images" test_labels: "test-labels" }
      optimizer { sgd { learning_rate: 0.1 } }
      batch_size: 8 seed: 1 intra_op_threads: 1 epochs: 100000)",
                                                            &job));
  job.mutable_dataset()->set_dir(DataDir());
  const Caller alice = User("alice");
  SubmitJobRequest submit;
  *submit.mutable_job() = job;
  SubmitJobResponse submitted;
  ASSERT_TRUE(Call(&Master::SubmitJobAsync, alice, submit, &submitted).ok());
  const std::string id = submitted.job_id();
  absl::Mutex mu;
  JobState state = PENDING;
  auto watch = master_->jobs()->Watch(id, [&](const JobStatus& s) {
    absl::MutexLock lock(&mu);
    state = s.state();
  });
  ASSERT_TRUE(watch.ok()) << watch.status();
  {
    absl::MutexLock lock(&mu);
    auto running = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return state == RUNNING; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&running), kWait)) << "the first job never started";
  }

  absl::Status s = Call(&Master::SubmitJobAsync, alice, submit, &submitted);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--max_queued_jobs=0")) << s;
  EXPECT_EQ(master_->jobs()->List().size(), 1u);
  EXPECT_EQ(master_->jobs()->Get(id)->state(), RUNNING);

  CancelJobRequest cancel;
  cancel.set_job_id(id);
  ASSERT_TRUE(Call(&Master::CancelJobAsync, alice, cancel).ok());
  auto end = master_->jobs()->Wait(id, kWait);
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->state(), CANCELLED);
  watch->reset();
}

TEST_F(MasterTest, AShutDownMasterRefusesReset) {
  master_->Shutdown();
  absl::Status s = Reset(Caller::Insecure());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(s.message(), "the master is shutting down");
}

}  // namespace
}  // namespace master
}  // namespace weft
