#include "master/master_session.h"

#include <map>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/tensor_proto_coding.h"
#include "common/test_util.h"
#include "graph/builder.h"
#include "gtest/gtest.h"
#include "master/cluster_probe.h"
#include "master/fake_worker.h"
#include "master/worker_cache.h"

namespace weft {
namespace master {
namespace {

// A task that registers anything, answers every fetch with a scalar 7, and
// records what the master asked. With `fail_run` its RunGraph fails; with
// `block_run` RunGraph completes only when AbortStep arrives (as a partition
// whose _Recv waits for a peer that failed).
class RecordingWorker : public FakeWorker {
 public:
  explicit RecordingWorker(std::string task) : FakeWorker(std::move(task)) {}

  absl::Status fail_run;
  bool block_run = false;

  void GetStatusAsync(const GetStatusRequest*, GetStatusResponse* response, StatusCallback done) override {
    {
      absl::MutexLock lock(&mu_);
      ++status_calls_;
    }
    response->set_task(task());
    response->set_incarnation(task().size());
    DeviceAttributes* d = response->add_device();
    d->set_name(task() + "/device:CPU:0");
    d->set_device_type("CPU");
    done(absl::OkStatus());
  }
  void RegisterGraphAsync(const RegisterGraphRequest* request, RegisterGraphResponse* response,
                          StatusCallback done) override {
    {
      absl::MutexLock lock(&mu_);
      registered_.push_back(*request);
      response->set_graph_handle(absl::StrCat("g", registered_.size()));
    }
    done(absl::OkStatus());
  }
  void DeregisterGraphAsync(const DeregisterGraphRequest* request, DeregisterGraphResponse*,
                            StatusCallback done) override {
    {
      absl::MutexLock lock(&mu_);
      deregistered_.push_back(request->graph_handle());
    }
    done(absl::OkStatus());
  }
  void RunGraphAsync(const RunGraphRequest* request, RunGraphResponse* response, absl::Duration,
                     StatusCallback done) override {
    {
      absl::MutexLock lock(&mu_);
      runs_.push_back(*request);
      for (int64_t id : request->cleanup_step_id()) cleanups_.push_back(id);
      if (block_run) {
        blocked_[request->step_id()] = std::move(done);
        return;
      }
    }
    if (!fail_run.ok()) {
      done(fail_run);
      return;
    }
    for (const std::string& key : request->recv_key()) {
      NamedTensorProto* t = response->add_recv();
      t->set_name(key);
      TensorToProto(Tensor::Scalar<float>(7.0f), t->mutable_tensor());
    }
    done(absl::OkStatus());
  }
  void AbortStepAsync(const AbortStepRequest* request, AbortStepResponse*, StatusCallback done) override {
    StatusCallback blocked;
    {
      absl::MutexLock lock(&mu_);
      aborts_.push_back(*request);
      auto it = blocked_.find(request->step_id());
      if (it != blocked_.end()) {
        blocked = std::move(it->second);
        blocked_.erase(it);
      }
    }
    if (blocked) blocked(absl::AbortedError(absl::StrCat("step aborted: ", request->message())));
    done(absl::OkStatus());
  }
  void CleanupStepAsync(const CleanupStepRequest* request, CleanupStepResponse*, StatusCallback done) override {
    {
      absl::MutexLock lock(&mu_);
      cleanups_.push_back(request->step_id());
      for (int64_t id : request->more_step_id()) cleanups_.push_back(id);
    }
    done(absl::OkStatus());
  }

  std::vector<RegisterGraphRequest> registered() {
    absl::MutexLock lock(&mu_);
    return registered_;
  }
  std::vector<std::string> deregistered() {
    absl::MutexLock lock(&mu_);
    return deregistered_;
  }
  std::vector<RunGraphRequest> runs() {
    absl::MutexLock lock(&mu_);
    return runs_;
  }
  std::vector<AbortStepRequest> aborts() {
    absl::MutexLock lock(&mu_);
    return aborts_;
  }
  std::vector<int64_t> cleanups() {
    absl::MutexLock lock(&mu_);
    return cleanups_;
  }
  int blocked() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(blocked_.size());
  }
  // Ends the blocked RunGraph of `step` with `status`.
  void Finish(int64_t step, const absl::Status& status) {
    StatusCallback done;
    {
      absl::MutexLock lock(&mu_);
      auto it = blocked_.find(step);
      ASSERT_NE(it, blocked_.end()) << step;
      done = std::move(it->second);
      blocked_.erase(it);
    }
    done(status);
  }
  int status_calls() {
    absl::MutexLock lock(&mu_);
    return status_calls_;
  }

 private:
  absl::Mutex mu_;
  std::vector<RegisterGraphRequest> registered_;
  std::vector<std::string> deregistered_;
  std::vector<RunGraphRequest> runs_;
  std::vector<AbortStepRequest> aborts_;
  std::vector<int64_t> cleanups_;
  std::map<int64_t, StatusCallback> blocked_;
  int status_calls_ = 0;
};

// A fake cluster of RecordingWorkers.
struct FakeCluster {
  explicit FakeCluster(const std::vector<std::string>& tasks) {
    cache = *WorkerCache::CreateLocal(tasks, [this](const std::string& task, const std::string&) {
      auto w = std::make_unique<RecordingWorker>(task);
      workers[task] = w.get();
      return w;
    });
    for (const std::string& t : tasks) cache->GetOrCreateWorker(t);
  }
  RecordingWorker* operator[](const std::string& task) { return workers.at(task); }

  std::map<std::string, RecordingWorker*> workers;
  std::unique_ptr<WorkerCache> cache;
};

constexpr char kPs[] = "/job:ps/task:0";
constexpr char kW0[] = "/job:worker/task:0";
constexpr char kW1[] = "/job:worker/task:1";

// x (fed, worker 0) -> MatMul with w (ps) -> Relu on worker 1 -> out.
GraphDef ThreeTaskGraph() {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {2, 3}, "x");
  b.set_device(kPs);
  Output w = b.Variable("w", DType::kFloat32, {3, 4}, "glorot_uniform", 5);
  b.set_device("");
  Output y = b.Op("MatMul", {x, w}, {}, "y");
  b.set_device(kW1);
  b.Op("Relu", {y}, {}, "out");
  EXPECT_TRUE(b.status().ok()) << b.status();
  return g.ToGraphDef();
}

Tensor Ones(const TensorShape& shape) {
  Tensor t(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.data<float>()[i] = 1.0f;
  return t;
}

TEST(MasterSessionTest, RegistersOncePerSignatureOnEveryTaskItUses) {
  FakeCluster c({kPs, kW0, kW1});
  auto s = MasterSession::Create("s", ThreeTaskGraph(), c.cache.get());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->default_device(), "/job:worker/task:0/device:CPU:0");
  std::vector<Tensor> out;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*s)->Run({{"x", Ones({2, 3})}}, {"out"}, {}, &out).ok());
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].data<float>()[0], 7.0f);
  }
  for (const char* t : {kPs, kW0, kW1}) EXPECT_EQ(c[t]->registered().size(), 1u) << t;
  EXPECT_EQ((*s)->num_signatures(), 1);

  // The feed went to worker 0, which holds its placeholder; the fetch to worker 1.
  const RegisterGraphRequest w0 = c[kW0]->registered()[0];
  ASSERT_EQ(w0.feed_size(), 1);
  EXPECT_EQ(w0.feed(0), "_feed/x_0");
  EXPECT_EQ(w0.fetch_size(), 0);
  const RegisterGraphRequest w1 = c[kW1]->registered()[0];
  ASSERT_EQ(w1.fetch_size(), 1);
  EXPECT_EQ(w1.fetch(0), "out");
  // The ps partition only sends: its _Send is a target so that it runs.
  const RegisterGraphRequest ps = c[kPs]->registered()[0];
  ASSERT_EQ(ps.target_size(), 1);
  EXPECT_TRUE(absl::StartsWith(ps.target(0), "_send/w_0/")) << ps.target(0);
  for (const NodeDef& n : ps.graph_def().node()) EXPECT_EQ(n.device(), "/job:ps/task:0/device:CPU:0");
  const RunGraphRequest run = c[kW0]->runs().back();
  ASSERT_EQ(run.send_size(), 1);
  EXPECT_EQ(run.send(0).name(), "_feed/x_0");

  // Every step has a fresh id, the same on every task. Each task has been
  // told to clean up the earlier steps in the RunGraph of the latest one.
  std::set<int64_t> ids;
  for (const RunGraphRequest& r : c[kW1]->runs()) ids.insert(r.step_id());
  EXPECT_EQ(ids.size(), 3u);
  for (const char* t : {kPs, kW0, kW1}) {
    std::vector<int64_t> cleaned = c[t]->cleanups();
    std::set<int64_t> earlier = ids;
    earlier.erase(c[t]->runs().back().step_id());
    EXPECT_EQ(std::set<int64_t>(cleaned.begin(), cleaned.end()), earlier) << t;
    EXPECT_EQ(cleaned.size(), earlier.size()) << t;  // once each
  }

  // A second signature registers again; the first stays cached.
  ASSERT_TRUE((*s)->Run({{"x", Ones({2, 3})}}, {"y"}, {}, &out).ok());
  ASSERT_TRUE((*s)->Run({{"x", Ones({2, 3})}}, {"out"}, {}, &out).ok());
  EXPECT_EQ((*s)->num_signatures(), 2);
  EXPECT_EQ(c[kW0]->registered().size(), 2u);
  EXPECT_EQ(c[kW1]->registered().size(), 1u);  // "y" does not need worker 1

  // Close deregisters every graph registered and cleans up every step.
  ASSERT_TRUE((*s)->Close().ok());
  for (const char* t : {kPs, kW0, kW1}) {
    EXPECT_EQ(c[t]->deregistered().size(), c[t]->registered().size()) << t;
    std::set<int64_t> all;
    for (const RunGraphRequest& r : c[t]->runs()) all.insert(r.step_id());
    std::vector<int64_t> cleaned = c[t]->cleanups();
    EXPECT_EQ(std::set<int64_t>(cleaned.begin(), cleaned.end()), all) << t;
    EXPECT_EQ(cleaned.size(), all.size()) << t;
  }
  absl::Status after = (*s)->Run({{"x", Ones({2, 3})}}, {"out"}, {}, &out);
  EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition);
}

TEST(MasterSessionTest, ConcurrentFirstRunsRegisterOnce) {
  FakeCluster c({kPs, kW0, kW1});
  auto s = *MasterSession::Create("s", ThreeTaskGraph(), c.cache.get());
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      std::vector<Tensor> out;
      if (s->Run({{"x", Ones({2, 3})}}, {"out"}, {}, &out).ok()) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 4);
  for (const char* t : {kPs, kW0, kW1}) EXPECT_EQ(c[t]->registered().size(), 1u) << t;
}

TEST(MasterSessionTest, FailingTaskAbortsTheStepOnEveryOtherTask) {
  FakeCluster c({kPs, kW0, kW1});
  c[kW1]->fail_run = absl::InvalidArgumentError("node 'out' (Relu): the input has NaN");
  c[kW0]->block_run = true;  // would wait forever without AbortStep
  c[kPs]->block_run = true;
  auto s = *MasterSession::Create("s", ThreeTaskGraph(), c.cache.get());
  std::vector<Tensor> out;
  absl::Status st = s->Run({{"x", Ones({2, 3})}}, {"out"}, {}, &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "task /job:worker/task:1: node 'out' (Relu): the input has NaN");

  const int64_t step = c[kW1]->runs().back().step_id();
  for (const char* t : {kPs, kW0}) {
    ASSERT_EQ(c[t]->aborts().size(), 1u) << t;
    EXPECT_EQ(c[t]->aborts()[0].step_id(), step);
    EXPECT_EQ(c[t]->aborts()[0].code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
    EXPECT_EQ(c[t]->blocked(), 0) << t;
  }
  EXPECT_TRUE(c[kW1]->aborts().empty());  // the failed task aborts its own step
  ASSERT_TRUE(s->Close().ok());
  for (const char* t : {kPs, kW0, kW1}) EXPECT_EQ(c[t]->cleanups(), std::vector<int64_t>{step}) << t;
}

TEST(MasterSessionTest, AbortRunningStepsUnblocksARun) {
  FakeCluster c({kPs, kW0, kW1});
  for (const char* t : {kPs, kW0, kW1}) c[t]->block_run = true;
  auto s = *MasterSession::Create("s", ThreeTaskGraph(), c.cache.get());
  absl::Status st;
  std::thread runner([&] {
    std::vector<Tensor> out;
    st = s->Run({{"x", Ones({2, 3})}}, {"out"}, {}, &out);
  });
  // Wait until every task holds the step, then abort it.
  EXPECT_TRUE(testing::WaitUntil(testing::kWaitTimeout, "every task to hold the step", [&]() -> absl::StatusOr<bool> {
    return c[kPs]->blocked() + c[kW0]->blocked() + c[kW1]->blocked() == 3;
  }));
  s->AbortRunningSteps(absl::CancelledError("job cancelled"));
  runner.join();
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(absl::StrContains(st.message(), "job cancelled")) << st;
  for (const char* t : {kPs, kW0, kW1}) {
    ASSERT_EQ(c[t]->aborts().size(), 1u) << t;
    EXPECT_EQ(c[t]->aborts()[0].code(), static_cast<int>(absl::StatusCode::kCancelled));
  }
}

// RunAsync never builds a plan (that waits for every task's RegisterGraph);
// once one is built, a step starts on the caller's thread and ends on the
// thread of the answer that completes it, with or without a failure.
TEST(MasterSessionTest, RunAsyncStartsOnlyBuiltPlansAndEndsOnTheLastAnswersThread) {
  FakeCluster c({kPs, kW0, kW1});
  auto s = *MasterSession::Create("s", ThreeTaskGraph(), c.cache.get());
  const std::vector<std::pair<std::string, Tensor>> feeds = {{"x", Ones({2, 3})}};
  bool called = false;
  EXPECT_FALSE(s->RunAsync(feeds, {"out"}, {}, 1, [&](absl::Status, std::vector<Tensor>) { called = true; }));
  EXPECT_FALSE(called);
  EXPECT_TRUE(c[kW0]->registered().empty());
  EXPECT_TRUE(c[kW0]->runs().empty());

  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run(feeds, {"out"}, {}, &out).ok());
  // These workers answer at once, on the caller's thread.
  absl::Status status = absl::UnknownError("not called");
  std::thread::id answered_on;
  ASSERT_TRUE(s->RunAsync(feeds, {"out"}, {}, 1, [&](absl::Status st, std::vector<Tensor> values) {
    status = st;
    out = std::move(values);
    answered_on = std::this_thread::get_id();
  }));
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(answered_on, std::this_thread::get_id());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data<float>()[0], 7.0f);
  EXPECT_EQ(c[kW0]->registered().size(), 1u);  // registered once, by Run

  // A step whose tasks hold it ends on the thread that aborts it, after the
  // aborts are answered; then the session closes without waiting.
  for (const char* t : {kPs, kW0, kW1}) c[t]->block_run = true;
  absl::Notification ended;
  ASSERT_TRUE(s->RunAsync(feeds, {"out"}, {}, 1, [&](absl::Status st, std::vector<Tensor>) {
    status = st;
    answered_on = std::this_thread::get_id();
    ended.Notify();
  }));
  EXPECT_FALSE(ended.HasBeenNotified());
  ASSERT_EQ(c[kPs]->blocked() + c[kW0]->blocked() + c[kW1]->blocked(), 3);
  std::thread::id aborter;
  std::thread t([&] {
    aborter = std::this_thread::get_id();
    s->AbortRunningSteps(absl::CancelledError("job cancelled"));
  });
  t.join();
  ASSERT_TRUE(ended.HasBeenNotified());
  EXPECT_EQ(answered_on, aborter);
  EXPECT_TRUE(absl::StrContains(status.message(), "job cancelled")) << status;
  for (const char* t : {kPs, kW0, kW1}) EXPECT_EQ(c[t]->aborts().size(), 1u) << t;
  EXPECT_TRUE(s->Close().ok());
  EXPECT_TRUE(s->RunAsync(feeds, {"out"}, {}, 1, [&](absl::Status st, std::vector<Tensor>) { status = st; }));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
}

// RunAsync's after_previous: a step names the newest pipelined step of its
// signature still running, on every task, and is aborted when that one fails.
TEST(MasterSessionTest, APipelinedStepFollowsTheOneBeforeAndIsAbortedWhenItFails) {
  FakeCluster c({kPs, kW0, kW1});
  auto s = *MasterSession::Create("s", ThreeTaskGraph(), c.cache.get());
  const std::vector<std::pair<std::string, Tensor>> feeds = {{"x", Ones({2, 3})}};
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run(feeds, {"out"}, {}, &out).ok());
  for (const char* t : {kPs, kW0, kW1}) c[t]->block_run = true;

  absl::Status first, second, third;
  absl::Notification first_ended, second_ended, third_ended;
  auto into = [](absl::Status* st, absl::Notification* n) {
    return [st, n](absl::Status s, std::vector<Tensor>) {
      *st = std::move(s);
      n->Notify();
    };
  };
  ASSERT_TRUE(s->RunAsync(feeds, {"out"}, {}, 1, into(&first, &first_ended), /*after_previous=*/true));
  ASSERT_TRUE(s->RunAsync(feeds, {"out"}, {}, 1, into(&second, &second_ended), /*after_previous=*/true));
  ASSERT_TRUE(s->RunAsync(feeds, {"out"}, {}, 1, into(&third, &third_ended)));  // not pipelined
  int64_t a = 0, b = 0;
  for (const char* t : {kPs, kW0, kW1}) {
    const std::vector<RunGraphRequest> runs = c[t]->runs();
    ASSERT_EQ(runs.size(), 4u) << t;
    a = runs[1].step_id();
    b = runs[2].step_id();
    EXPECT_EQ(runs[1].after_step_id(), 0) << t;  // nothing before it
    EXPECT_EQ(runs[2].after_step_id(), a) << t;
    EXPECT_EQ(runs[3].after_step_id(), 0) << t;
  }

  // The first fails on worker 1: the session aborts it elsewhere, and the
  // second with it, naming why; the third runs on.
  c[kW1]->Finish(a, absl::InvalidArgumentError("node 'out' (Relu): the input has NaN"));
  ASSERT_TRUE(first_ended.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(first.code(), absl::StatusCode::kInvalidArgument) << first;
  ASSERT_TRUE(second_ended.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(second.code(), absl::StatusCode::kAborted) << second;
  EXPECT_TRUE(absl::StrContains(
      second.message(), absl::StrCat("step ", a, ", which it follows, failed: task /job:worker/task:1: node 'out'")))
      << second;
  for (const char* t : {kPs, kW0, kW1}) {
    bool told = false;
    for (const AbortStepRequest& r : c[t]->aborts()) told = told || r.step_id() == b;
    EXPECT_TRUE(told) << t;
  }
  EXPECT_FALSE(third_ended.HasBeenNotified());
  s->AbortRunningSteps(absl::CancelledError("test over"));
  ASSERT_TRUE(third_ended.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(s->Close().ok());
}

TEST(MasterSessionTest, FetchingAFedTensorAndUnusedFeeds) {
  FakeCluster c({kW0});
  Graph g;
  GraphBuilder b(&g);
  Output a = b.Placeholder(DType::kFloat32, {2}, "a");
  b.Placeholder(DType::kFloat32, {2}, "x");
  b.Op("Relu", {a}, {}, "r");
  ASSERT_TRUE(b.status().ok());
  auto s = *MasterSession::Create("s", g.ToGraphDef(), c.cache.get());
  std::vector<Tensor> out;
  // "x" is fed but nothing needs it: it is not sent anywhere.
  ASSERT_TRUE(s->Run({{"a", Ones({2})}, {"x", Ones({2})}}, {"r", "a"}, {}, &out).ok());
  const RegisterGraphRequest r = c[kW0]->registered()[0];
  EXPECT_EQ(std::vector<std::string>(r.fetch().begin(), r.fetch().end()),
            (std::vector<std::string>{"r", "_feed/a_0"}));
  EXPECT_EQ(std::vector<std::string>(r.feed().begin(), r.feed().end()), std::vector<std::string>{"_feed/a_0"});
  EXPECT_EQ(c[kW0]->runs().back().send_size(), 1);

  absl::Status twice = s->Run({{"a", Ones({2})}, {"a", Ones({2})}}, {"r"}, {}, &out);
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  absl::Status unknown = s->Run({}, {"nope"}, {}, &out);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(unknown.message(), "nope")) << unknown;
}

TEST(MasterSessionTest, AFeedTheGraphCannotTakeIsRefusedBeforeAnyTaskSeesIt) {
  FakeCluster c({kPs, kW0, kW1});
  auto s = *MasterSession::Create("s", ThreeTaskGraph(), c.cache.get());
  std::vector<Tensor> out;
  const std::vector<std::pair<std::vector<std::pair<std::string, Tensor>>, std::string>> cases = {
      {{{"x", Tensor(DType::kInt32, {2, 3})}}, "feed 'x' must be float32[2,3], got int32[2,3]"},
      {{{"x", Ones({3, 3})}}, "feed 'x' must be float32[2,3], got float32[3,3]"},
      {{{"x", Tensor()}}, "feed 'x' must be float32[2,3], got an uninitialized tensor"},
      {{{"nope", Ones({2, 3})}}, "feed 'nope': no node named 'nope' in the graph"},
      // Any tensor may be fed, in its own type and shape: y is [2,4].
      {{{"x", Ones({2, 3})}, {"y", Ones({2, 3})}}, "feed 'y' must be float32[2,4], got float32[2,3]"},
  };
  for (const auto& [feeds, message] : cases) {
    absl::Status st = s->Run(feeds, {"out"}, {}, &out);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_EQ(std::string(st.message()), message);
  }
  for (const char* t : {kPs, kW0, kW1}) {
    EXPECT_TRUE(c[t]->registered().empty()) << t;
    EXPECT_TRUE(c[t]->runs().empty()) << t;
  }
  EXPECT_TRUE(s->Run({{"x", Ones({2, 3})}, {"y", Ones({2, 4})}}, {"out"}, {}, &out).ok());
}

TEST(MasterSessionTest, ExtendAddsNodesAndRejectsDuplicates) {
  FakeCluster c({kW0});
  Graph g;
  GraphBuilder b(&g);
  b.Placeholder(DType::kFloat32, {2}, "a");
  auto s = *MasterSession::Create("s", g.ToGraphDef(), c.cache.get());
  GraphDef more;
  NodeDef* n = more.add_node();
  n->set_name("r");
  n->set_op("Relu");
  n->add_input("a");
  ASSERT_TRUE(s->Extend(more).ok());
  std::vector<Tensor> out;
  EXPECT_TRUE(s->Run({{"a", Ones({2})}}, {"r"}, {}, &out).ok());
  absl::Status dup = s->Extend(more);
  EXPECT_EQ(dup.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(dup.message(), "'r'")) << dup;
}

TEST(MasterSessionTest, TaskErrorsAtCreateNameTheTask) {
  auto cache = *WorkerCache::CreateLocal({kW0}, [](const std::string& task, const std::string&) {
    return std::make_unique<FakeWorker>(task);  // GetStatus: UNIMPLEMENTED
  });
  Graph g;
  auto s = MasterSession::Create("s", g.ToGraphDef(), cache.get());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StartsWith(s.status().message(), "task /job:worker/task:0: ")) << s.status();
}

TEST(MasterSessionTest, CreateFromAProbeAsksNoTaskAgain) {
  FakeCluster c({kPs, kW0, kW1});
  const ClusterProbe probe = ProbeCluster(c.cache.get());
  for (const char* t : {kPs, kW0, kW1}) ASSERT_EQ(c[t]->status_calls(), 1) << t;
  auto s = MasterSession::Create("s", ThreeTaskGraph(), c.cache.get(), probe);
  ASSERT_TRUE(s.ok()) << s.status();
  for (const char* t : {kPs, kW0, kW1}) EXPECT_EQ(c[t]->status_calls(), 1) << t;
  EXPECT_EQ((*s)->devices(), (std::vector<std::string>{"/job:ps/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:0",
                                                       "/job:worker/task:1/device:CPU:0"}));
  EXPECT_EQ((*s)->default_device(), "/job:worker/task:0/device:CPU:0");
  EXPECT_EQ((*s)->task_incarnations(),
            (std::map<std::string, uint64_t>{{kPs, std::string(kPs).size()},
                                             {kW0, std::string(kW0).size()},
                                             {kW1, std::string(kW1).size()}}));
  std::vector<Tensor> out;
  ASSERT_TRUE((*s)->Run({{"x", Ones({2, 3})}}, {"out"}, {}, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data<float>()[0], 7.0f);
}

TEST(MasterSessionTest, CreateFromAFailedProbeNamesTheTask) {
  auto cache = *WorkerCache::CreateLocal({kW0}, [](const std::string& task, const std::string&) {
    return std::make_unique<FakeWorker>(task);  // GetStatus: UNIMPLEMENTED
  });
  const ClusterProbe probe = ProbeCluster(cache.get());
  Graph g;
  auto s = MasterSession::Create("s", g.ToGraphDef(), cache.get(), probe);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StartsWith(s.status().message(), "task /job:worker/task:0: ")) << s.status();
}

}  // namespace
}  // namespace master
}  // namespace weft
