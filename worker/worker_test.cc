#include "worker/worker.h"

#include <limits>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "common/cluster_spec.h"
#include "common/tensor_proto_coding.h"
#include "common/test_util.h"
#include "graph/builder.h"
#include "graph/partition.h"
#include "gtest/gtest.h"
#include "runtime/executor.h"
#include "runtime/testing/test_util.h"
#include "worker/local_worker.h"
#include "worker/worker_test_util.h"

namespace weft {
namespace worker {
namespace {

using testing::kTask0;
using testing::kTask0Cpu;
using testing::kTask1;
using testing::kTask1Cpu;
using testing::MakeRegisterRequest;
using testing::WaitFor;
using weft::testing::kWaitTimeout;
using weft::testing::WaitUntil;

void AddFeed(RunGraphRequest* r, const std::string& name, const Tensor& t) {
  NamedTensorProto* s = r->add_send();
  s->set_name(name);
  TensorToProto(t, s->mutable_tensor());
}

Tensor Fetched(const RunGraphResponse& r, const std::string& name) {
  for (const NamedTensorProto& t : r.recv()) {
    if (t.name() == name) return TensorFromProto(t.tensor()).value();
  }
  ADD_FAILURE() << "no fetch " << name;
  return Tensor();
}

WorkerOptions Options(int task) {
  WorkerOptions o;
  o.task_index = task;
  return o;
}

// Two tasks in one process, connected by direct calls.
class WorkerTest : public ::testing::Test {
 protected:
  WorkerTest() {
    WorkerOptions o0 = Options(0), o1 = Options(1);
    o0.puller = o1.puller = &puller_;
    w0_ = std::make_unique<Worker>(o0);
    w1_ = std::make_unique<Worker>(o1);
    puller_.AddWorker(w0_.get());
    puller_.AddWorker(w1_.get());
    lw0_ = std::make_unique<LocalWorker>(w0_.get());
    lw1_ = std::make_unique<LocalWorker>(w1_.get());
  }
  ~WorkerTest() override {
    w0_->Shutdown();
    w1_->Shutdown();
  }

  absl::StatusOr<std::string> Register(WorkerInterface* w, const RegisterGraphRequest& req) {
    RegisterGraphResponse resp;
    absl::Status s = WaitFor([&](StatusCallback d) { w->RegisterGraphAsync(&req, &resp, d); });
    if (!s.ok()) return s;
    return resp.graph_handle();
  }
  absl::Status Run(WorkerInterface* w, const RunGraphRequest& req, RunGraphResponse* resp) {
    return WaitFor([&](StatusCallback d) { w->RunGraphAsync(&req, resp, absl::InfiniteDuration(), d); });
  }

  InProcessTensorPuller puller_;
  std::unique_ptr<Worker> w0_, w1_;
  std::unique_ptr<LocalWorker> lw0_, lw1_;
};

TEST_F(WorkerTest, GetStatusReportsTaskIncarnationAndDevices) {
  GetStatusRequest req;
  GetStatusResponse resp;
  ASSERT_TRUE(WaitFor([&](StatusCallback d) { lw0_->GetStatusAsync(&req, &resp, d); }).ok());
  EXPECT_EQ(resp.task(), kTask0);
  EXPECT_NE(resp.incarnation(), 0u);
  EXPECT_EQ(resp.incarnation(), w0_->incarnation());
  EXPECT_NE(w0_->incarnation(), w1_->incarnation());
  ASSERT_EQ(resp.device_size(), 1);
  EXPECT_EQ(resp.device(0).name(), kTask0Cpu);
  EXPECT_EQ(resp.device(0).device_type(), "CPU");
}

class SingleTaskGraph : public WorkerTest {
 protected:
  void SetUp() override {
    Graph g;
    GraphBuilder b(&g);
    b.set_device(kTask0Cpu);
    Output x = b.Placeholder(DType::kFloat32, {2, 2}, "x");
    Output w = b.Const(weft::testing::FloatTensor({2, 2}, {1, 2, 3, 4}), "w");
    Output y = b.Op("MatMul", {x, w}, {}, "y");
    b.Op("Relu", {y}, {}, "r");
    ASSERT_TRUE(b.status().ok()) << b.status();
    auto h = Register(lw0_.get(), MakeRegisterRequest(g.ToGraphDef(), {"x"}, {"y", "r"}));
    ASSERT_TRUE(h.ok()) << h.status();
    handle_ = *h;
  }
  RunGraphRequest Request(const Tensor& x) {
    RunGraphRequest r;
    r.set_graph_handle(handle_);
    r.set_step_id(1);
    AddFeed(&r, "x", x);
    return r;
  }
  std::string handle_;
};

TEST_F(SingleTaskGraph, RunsWithFeedsAndFetches) {
  RunGraphRequest req = Request(weft::testing::FloatTensor({2, 2}, {1, 0, 0, -1}));
  RunGraphResponse resp;
  ASSERT_TRUE(Run(lw0_.get(), req, &resp).ok());
  ASSERT_EQ(resp.recv_size(), 2);
  EXPECT_EQ(weft::testing::MaxAbsDiff(Fetched(resp, "y"), weft::testing::FloatTensor({2, 2}, {1, 2, -3, -4})), 0);
  EXPECT_EQ(weft::testing::MaxAbsDiff(Fetched(resp, "r"), weft::testing::FloatTensor({2, 2}, {1, 2, 0, 0})), 0);

  // recv_key picks a subset, in the order asked.
  req.add_recv_key("r");
  resp.Clear();
  ASSERT_TRUE(Run(lw0_.get(), req, &resp).ok());
  ASSERT_EQ(resp.recv_size(), 1);
  EXPECT_EQ(resp.recv(0).name(), "r");
}

TEST_F(SingleTaskGraph, BadFeedsAndFetchesAreInvalidArgumentNamingThem) {
  RunGraphResponse resp;
  RunGraphRequest wrong_dtype = Request(weft::testing::IntTensor({2, 2}, {1, 2, 3, 4}));
  absl::Status s = Run(lw0_.get(), wrong_dtype, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "feed 'x'")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "task /job:worker/task:0")) << s;

  RunGraphRequest missing;
  missing.set_graph_handle(handle_);
  s = Run(lw0_.get(), missing, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "feed 'x' has no value")) << s;

  RunGraphRequest unknown = Request(weft::testing::FloatTensor({2, 2}, {1, 2, 3, 4}));
  AddFeed(&unknown, "nope", Tensor::Scalar<float>(1));
  s = Run(lw0_.get(), unknown, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "'nope'")) << s;

  RunGraphRequest bad_fetch = Request(weft::testing::FloatTensor({2, 2}, {1, 2, 3, 4}));
  bad_fetch.add_recv_key("zzz");
  s = Run(lw0_.get(), bad_fetch, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "'zzz'")) << s;
}

TEST_F(SingleTaskGraph, UnknownOrDeregisteredHandleIsNotFound) {
  RunGraphRequest req = Request(weft::testing::FloatTensor({2, 2}, {1, 2, 3, 4}));
  req.set_graph_handle("no_such_graph");
  RunGraphResponse resp;
  absl::Status s = Run(lw0_.get(), req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "'no_such_graph'")) << s;

  DeregisterGraphRequest dereg;
  dereg.set_graph_handle(handle_);
  DeregisterGraphResponse dresp;
  ASSERT_TRUE(WaitFor([&](StatusCallback d) { lw0_->DeregisterGraphAsync(&dereg, &dresp, d); }).ok());
  EXPECT_EQ(w0_->NumGraphs(), 0);
  EXPECT_EQ(Run(lw0_.get(), Request(weft::testing::FloatTensor({2, 2}, {1, 2, 3, 4})), &resp).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(WaitFor([&](StatusCallback d) { lw0_->DeregisterGraphAsync(&dereg, &dresp, d); }).code(),
            absl::StatusCode::kNotFound);
}

// The thread RunGraph's `done` ran on, and the step's status.
std::pair<std::thread::id, absl::Status> RunOnWhichThread(WorkerInterface* w, const RunGraphRequest& req) {
  RunGraphResponse resp;
  absl::Notification finished;
  std::pair<std::thread::id, absl::Status> got;
  w->RunGraphAsync(&req, &resp, absl::InfiniteDuration(), [&](const absl::Status& s) {
    got = {std::this_thread::get_id(), s};
    finished.Notify();
  });
  finished.WaitForNotification();
  return got;
}

// One task whose steps count as short (or never, with a budget of 0), so
// that a slow machine cannot move a step between threads; it has the graph
// r = Relu(x).
class InlineBudgetTest : public ::testing::Test {
 protected:
  void Start(int64_t budget_nanos) {
    WorkerOptions o = Options(0);
    o.limits.inline_run_budget_nanos = budget_nanos;
    worker_ = std::make_unique<Worker>(o);
    local_ = std::make_unique<LocalWorker>(worker_.get());
    Graph g;
    GraphBuilder b(&g);
    b.set_device(kTask0Cpu);
    Output x = b.Placeholder(DType::kFloat32, {2, 2}, "x");
    b.Op("Relu", {x}, {}, "r");
    ASSERT_TRUE(b.status().ok()) << b.status();
    const RegisterGraphRequest reg = MakeRegisterRequest(g.ToGraphDef(), {"x"}, {"r"});
    RegisterGraphResponse resp;
    ASSERT_TRUE(WaitFor([&](StatusCallback d) { local_->RegisterGraphAsync(&reg, &resp, d); }).ok());
    req_.set_graph_handle(resp.graph_handle());
    req_.set_step_id(1);
    AddFeed(&req_, "x", weft::testing::FloatTensor({2, 2}, {1, 0, 0, -1}));
  }
  ~InlineBudgetTest() override {
    if (worker_ != nullptr) worker_->Shutdown();
  }

  std::unique_ptr<Worker> worker_;
  std::unique_ptr<LocalWorker> local_;
  RunGraphRequest req_;
  const std::thread::id here_ = std::this_thread::get_id();
};

// A short step that only computes is served on the thread that received it
// once one run has measured it; the first run, several iterations and a
// traced step go to the compute pool.
TEST_F(InlineBudgetTest, AShortComputeOnlyStepRunsOnTheCallersThreadOnceMeasured) {
  Start(std::numeric_limits<int64_t>::max());
  auto [first, s1] = RunOnWhichThread(local_.get(), req_);
  ASSERT_TRUE(s1.ok()) << s1;
  EXPECT_NE(first, here_);
  auto [second, s2] = RunOnWhichThread(local_.get(), req_);
  ASSERT_TRUE(s2.ok()) << s2;
  EXPECT_EQ(second, here_);

  RunGraphRequest many = req_;
  many.set_iterations(2);
  auto [iterated, s3] = RunOnWhichThread(local_.get(), many);
  ASSERT_TRUE(s3.ok()) << s3;
  EXPECT_NE(iterated, here_);
  RunGraphRequest traced = req_;
  traced.set_trace(true);
  auto [traced_on, s4] = RunOnWhichThread(local_.get(), traced);
  ASSERT_TRUE(s4.ok()) << s4;
  EXPECT_NE(traced_on, here_);

  // Bad input is refused inline too, and the task serves on.
  RunGraphRequest bad = req_;
  bad.clear_send();
  auto [bad_on, s5] = RunOnWhichThread(local_.get(), bad);
  EXPECT_EQ(s5.code(), absl::StatusCode::kInvalidArgument) << s5;
  EXPECT_EQ(bad_on, here_);
  auto [again, s6] = RunOnWhichThread(local_.get(), req_);
  EXPECT_TRUE(s6.ok()) << s6;
  EXPECT_EQ(again, here_);

  // After Shutdown an inline step is refused as a pooled one is.
  worker_->Shutdown();
  auto [late, s7] = RunOnWhichThread(local_.get(), req_);
  EXPECT_EQ(s7.code(), absl::StatusCode::kUnavailable) << s7;
}

TEST_F(InlineBudgetTest, NoStepRunsOnTheCallersThreadWithoutABudget) {
  Start(0);
  for (int i = 0; i < 3; ++i) {
    auto [on, s] = RunOnWhichThread(local_.get(), req_);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_NE(on, here_) << "run " << i;
  }
}

TEST_F(WorkerTest, RegisterRejectsAnotherTasksDevice) {
  Graph g;
  GraphBuilder b(&g);
  b.set_device(kTask1Cpu);
  b.ScalarConst(1.0f, "c");
  ASSERT_TRUE(b.status().ok());
  auto h = Register(lw0_.get(), MakeRegisterRequest(g.ToGraphDef(), {}, {"c"}));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(h.status().message(), "node 'c'")) << h.status();
}

TEST_F(WorkerTest, SessionsKeepTheirOwnVariables) {
  // The same variable name in two sessions, with different shapes: each
  // session sees its own; graphs of one session share theirs.
  auto graph = [](int64_t n) {
    Graph g;
    GraphBuilder b(&g);
    Output v = b.Variable("v", DType::kFloat32, {n}, "ones");
    b.Op("ApplyGradientDescent", {v, b.Const(weft::testing::FloatTensor({n}, std::vector<float>(n, 1.0f)), "g")},
         {Attr("learning_rate", 1.0f)}, "apply");
    EXPECT_TRUE(b.status().ok()) << b.status();
    return g.ToGraphDef();
  };
  auto reg = [&](const std::string& session, int64_t n) {
    RegisterGraphRequest r = MakeRegisterRequest(graph(n), {}, {"apply"});
    r.set_session_handle(session);
    return Register(lw0_.get(), r);
  };
  auto run = [&](const std::string& session, const std::string& handle) {
    RunGraphRequest req;
    req.set_session_handle(session);
    req.set_graph_handle(handle);
    req.set_step_id(1);
    RunGraphResponse resp;
    EXPECT_TRUE(Run(lw0_.get(), req, &resp).ok());
    return Fetched(resp, "apply");
  };
  auto a1 = reg("session-a", 2);
  auto a2 = reg("session-a", 2);
  auto b1 = reg("session-b", 3);
  ASSERT_TRUE(a1.ok() && a2.ok() && b1.ok()) << a1.status() << b1.status();
  EXPECT_EQ(run("session-a", *a1).data<float>()[0], 0.0f);   // 1 - 1
  EXPECT_EQ(run("session-a", *a2).data<float>()[0], -1.0f);  // the same variable, updated again
  Tensor b = run("session-b", *b1);                          // its own [3] variable, fresh
  EXPECT_EQ(b.shape(), TensorShape({3}));
  EXPECT_EQ(b.data<float>()[0], 0.0f);
}

TEST_F(WorkerTest, AGraphRunsAndDeregistersOnlyInItsOwnSession) {
  Graph g;
  GraphBuilder b(&g);
  b.Const(weft::testing::FloatTensor({1}, {7}), "c");
  ASSERT_TRUE(b.status().ok());
  RegisterGraphRequest r = MakeRegisterRequest(g.ToGraphDef(), {}, {"c"});
  r.set_session_handle("session-a");
  auto h = Register(lw0_.get(), r);
  ASSERT_TRUE(h.ok()) << h.status();
  // Another session naming the handle: as unknown as a handle never issued.
  RunGraphRequest req;
  req.set_session_handle("session-b");
  req.set_graph_handle(*h);
  req.set_step_id(1);
  RunGraphResponse resp;
  absl::Status other = Run(lw0_.get(), req, &resp);
  EXPECT_EQ(other.code(), absl::StatusCode::kNotFound) << other;
  DeregisterGraphRequest d;
  d.set_session_handle("session-b");
  d.set_graph_handle(*h);
  DeregisterGraphResponse dr;
  absl::Notification done;
  absl::Status dereg;
  lw0_->DeregisterGraphAsync(&d, &dr, [&](const absl::Status& s) {
    dereg = s;
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kWaitTimeout)) << "DeregisterGraph never completed";
  EXPECT_EQ(dereg.code(), absl::StatusCode::kNotFound) << dereg;
  // Its own session still runs it: the refused calls changed nothing.
  req.set_session_handle("session-a");
  ASSERT_TRUE(Run(lw0_.get(), req, &resp).ok());
  EXPECT_EQ(Fetched(resp, "c").data<float>()[0], 7.0f);
  // Handles carry 128 random bits beyond the process prefix.
  EXPECT_GE(h->size(), 32u) << *h;
}

TEST_F(WorkerTest, IterationsRunTheStepThatManyTimes) {
  Graph g;
  GraphBuilder b(&g);
  Output v = b.Variable("v", DType::kFloat32, {2}, "ones");
  Output grad = b.Const(weft::testing::FloatTensor({2}, {1, 2}), "grad");
  b.Op("ApplyGradientDescent", {v, grad}, {Attr("learning_rate", 0.5f)}, "apply");
  Output s = b.Variable("s", DType::kFloat32, {}, "ones");
  b.Op("ApplyGradientDescent", {s, b.Const(Tensor::Scalar<float>(1.0f), "one")}, {Attr("learning_rate", 0.5f)},
       "scalar");
  ASSERT_TRUE(b.status().ok()) << b.status();
  auto h = Register(lw0_.get(), MakeRegisterRequest(g.ToGraphDef(), {}, {"apply", "scalar"}));
  ASSERT_TRUE(h.ok()) << h.status();

  RunGraphRequest req;
  req.set_graph_handle(*h);
  req.set_step_id(10);
  req.set_iterations(3);
  RunGraphResponse resp;
  ASSERT_TRUE(Run(lw0_.get(), req, &resp).ok());
  // v = 1 - 3 * 0.5 * grad
  EXPECT_EQ(weft::testing::MaxAbsDiff(Fetched(resp, "apply"), weft::testing::FloatTensor({2}, {-0.5f, -2.0f})), 0);
  // A float scalar (a loss) is the mean over the iterations: s went 0.5, 0, -0.5.
  EXPECT_EQ(Fetched(resp, "scalar").data<float>()[0], 0.0f);

  req.set_iterations(1);
  req.set_step_id(13);
  resp.Clear();
  ASSERT_TRUE(Run(lw0_.get(), req, &resp).ok());
  EXPECT_EQ(weft::testing::MaxAbsDiff(Fetched(resp, "apply"), weft::testing::FloatTensor({2}, {-1.0f, -3.0f})), 0);

  req.set_iterations(-1);
  EXPECT_EQ(Run(lw0_.get(), req, &resp).code(), absl::StatusCode::kInvalidArgument);
}

class TwoTasks : public WorkerTest {
 protected:
  void SetUp() override {
    auto split = testing::BuildSplitGraph(3, 4, 2, /*seed=*/7);
    ASSERT_TRUE(split.ok()) << split.status();
    split_ = *std::move(split);
    auto h0 = Register(lw0_.get(), MakeRegisterRequest(split_.part0, {"x"}, {"z"}));
    auto h1 = Register(lw1_.get(), MakeRegisterRequest(split_.part1, {}, {"y"}));
    ASSERT_TRUE(h0.ok()) << h0.status();
    ASSERT_TRUE(h1.ok()) << h1.status();
    req0_.set_graph_handle(*h0);
    req1_.set_graph_handle(*h1);
  }

  // Runs both partitions of `step` at once.
  void RunStep(int64_t step, const Tensor& x, absl::Status* s0, absl::Status* s1, RunGraphResponse* r0,
               RunGraphResponse* r1) {
    req0_.set_step_id(step);
    req1_.set_step_id(step);
    req0_.clear_send();
    AddFeed(&req0_, "x", x);
    std::thread t1([&] { *s1 = Run(lw1_.get(), req1_, r1); });
    *s0 = Run(lw0_.get(), req0_, r0);
    t1.join();
  }

  testing::SplitGraph split_;
  RunGraphRequest req0_, req1_;
  RunGraphResponse r1_;
};

TEST_F(TwoTasks, PartitionedStepMatchesTheWholeGraph) {
  CpuDevice cpu("/device:CPU:0", 1);
  for (int64_t step = 1; step <= 3; ++step) {
    Tensor x = weft::testing::RandomTensor({3, 4}, step);
    absl::Status s0, s1;
    RunGraphResponse r0, r1;
    RunStep(step, x, &s0, &s1, &r0, &r1);
    ASSERT_TRUE(s0.ok()) << s0;
    ASSERT_TRUE(s1.ok()) << s1;
    auto want = RunGraphOnce(*split_.whole, &cpu, {{"x", x}}, {"z", "y"});
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_LE(weft::testing::MaxAbsDiff(Fetched(r0, "z"), (*want)[0]), 1e-6);
    EXPECT_LE(weft::testing::MaxAbsDiff(Fetched(r1, "y"), (*want)[1]), 1e-6);
    for (WorkerInterface* w : {static_cast<WorkerInterface*>(lw0_.get()), static_cast<WorkerInterface*>(lw1_.get())}) {
      CleanupStepRequest c;
      c.set_step_id(step);
      CleanupStepResponse cr;
      ASSERT_TRUE(WaitFor([&](StatusCallback d) { w->CleanupStepAsync(&c, &cr, d); }).ok());
    }
  }
  EXPECT_EQ(w0_->rendezvous_mgr()->NumSteps(), 0);
  EXPECT_EQ(w1_->rendezvous_mgr()->NumSteps(), 0);
}

// The master piggybacks the cleanup of ended steps on the next RunGraph.
TEST_F(TwoTasks, RunGraphDropsTheStepsItIsToldToCleanUp) {
  absl::Status s0, s1;
  RunGraphResponse r0, r1;
  RunStep(1, weft::testing::RandomTensor({3, 4}, 1), &s0, &s1, &r0, &r1);
  ASSERT_TRUE(s0.ok() && s1.ok()) << s0 << s1;
  RunStep(2, weft::testing::RandomTensor({3, 4}, 2), &s0, &s1, &r0, &r1);
  ASSERT_TRUE(s0.ok() && s1.ok()) << s0 << s1;
  ASSERT_EQ(w0_->rendezvous_mgr()->NumSteps(), 2);
  ASSERT_EQ(w1_->rendezvous_mgr()->NumSteps(), 2);
  req0_.add_cleanup_step_id(1);
  req0_.add_cleanup_step_id(2);
  req1_.add_cleanup_step_id(1);
  req1_.add_cleanup_step_id(2);
  RunStep(3, weft::testing::RandomTensor({3, 4}, 3), &s0, &s1, &r0, &r1);
  ASSERT_TRUE(s0.ok() && s1.ok()) << s0 << s1;
  EXPECT_EQ(w0_->rendezvous_mgr()->NumSteps(), 1);  // step 3's own
  EXPECT_EQ(w1_->rendezvous_mgr()->NumSteps(), 1);
}

// A partition with a _Recv can wait for its peer: it never runs on the
// thread that received RunGraph, however short its runs.
TEST_F(TwoTasks, APartitionThatCanWaitNeverRunsOnTheCallersThread) {
  const std::thread::id here = std::this_thread::get_id();
  for (int64_t step = 1; step <= 3; ++step) {
    req0_.set_step_id(step);
    req1_.set_step_id(step);
    req0_.clear_send();
    AddFeed(&req0_, "x", weft::testing::RandomTensor({3, 4}, step));
    absl::Status s1;
    std::thread t1([&] { s1 = Run(lw1_.get(), req1_, &r1_); });
    auto [on, s0] = RunOnWhichThread(lw0_.get(), req0_);
    t1.join();
    ASSERT_TRUE(s0.ok()) << s0;
    ASSERT_TRUE(s1.ok()) << s1;
    EXPECT_NE(on, here) << "step " << step;
  }
}

// The round trip x -> task 1 -> task 0 with no inter-op threads and one
// compute thread per task: every partition runs inline, and only an
// asynchronous _Recv lets task 0 reach its _Send while its _Recv waits.
TEST(WorkerInlineTest, RoundTripRunsWithoutInterOpThreads) {
  InProcessTensorPuller puller;
  WorkerOptions o0 = Options(0), o1 = Options(1);
  for (WorkerOptions* o : {&o0, &o1}) {
    o->inter_op_threads = 0;
    o->compute_threads = 1;
    o->puller = &puller;
  }
  Worker w0(o0), w1(o1);
  puller.AddWorker(&w0);
  puller.AddWorker(&w1);
  LocalWorker lw0(&w0), lw1(&w1);
  auto split = testing::BuildSplitGraph(3, 4, 2, /*seed=*/5);
  ASSERT_TRUE(split.ok()) << split.status();
  RegisterGraphRequest reg0 = MakeRegisterRequest(split->part0, {"x"}, {"z"});
  RegisterGraphRequest reg1 = MakeRegisterRequest(split->part1, {}, {"y"});
  RegisterGraphResponse h0, h1;
  ASSERT_TRUE(WaitFor([&](StatusCallback d) { lw0.RegisterGraphAsync(&reg0, &h0, d); }).ok());
  ASSERT_TRUE(WaitFor([&](StatusCallback d) { lw1.RegisterGraphAsync(&reg1, &h1, d); }).ok());
  RunGraphRequest req0, req1;
  req0.set_graph_handle(h0.graph_handle());
  req1.set_graph_handle(h1.graph_handle());
  req0.set_step_id(1);
  req1.set_step_id(1);
  Tensor x = weft::testing::RandomTensor({3, 4}, 1);
  AddFeed(&req0, "x", x);
  RunGraphResponse r0, r1;
  absl::Notification n1;
  absl::Status s1;
  lw1.RunGraphAsync(&req1, &r1, absl::InfiniteDuration(), [&](const absl::Status& s) {
    s1 = s;
    n1.Notify();
  });
  absl::Status s0 =
      WaitFor([&](StatusCallback d) { lw0.RunGraphAsync(&req0, &r0, absl::InfiniteDuration(), d); });
  ASSERT_TRUE(n1.WaitForNotificationWithTimeout(kWaitTimeout)) << "task 1's RunGraph never completed";
  ASSERT_TRUE(s0.ok()) << s0;
  ASSERT_TRUE(s1.ok()) << s1;
  CpuDevice cpu("/device:CPU:0", 1);
  auto want = RunGraphOnce(*split->whole, &cpu, {{"x", x}}, {"z"});
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_LE(weft::testing::MaxAbsDiff(Fetched(r0, "z"), (*want)[0]), 1e-6);
}

// Task 1 waits for h, which task 0 never sends (it is not run): AbortStep must
// wake the blocked _Recv with the abort's status.
TEST_F(TwoTasks, AbortStepWakesABlockedRecv) {
  req1_.set_step_id(5);
  absl::Notification finished;
  absl::Status s1;
  RunGraphResponse r1;
  lw1_->RunGraphAsync(&req1_, &r1, absl::InfiniteDuration(), [&](const absl::Status& s) {
    s1 = s;
    finished.Notify();
  });
  // The pull reaches task 0's table once the _Recv waits.
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "task 1's _Recv to pull from task 0",
                        [&] { return w0_->rendezvous_mgr()->NumSteps() > 0; }));
  EXPECT_FALSE(finished.WaitForNotificationWithTimeout(absl::Milliseconds(50)));

  AbortStepRequest abort;
  abort.set_step_id(5);
  abort.set_code(static_cast<int>(absl::StatusCode::kAborted));
  abort.set_message("task /job:worker/task:0 failed");
  AbortStepResponse ar;
  ASSERT_TRUE(WaitFor([&](StatusCallback d) { lw1_->AbortStepAsync(&abort, &ar, d); }).ok());
  ASSERT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(s1.code(), absl::StatusCode::kAborted) << s1;
  EXPECT_TRUE(absl::StrContains(s1.message(), "task /job:worker/task:0 failed")) << s1;
  EXPECT_TRUE(absl::StrContains(s1.message(), "_Recv")) << s1;
}

// A bad feed fails task 0's step before it sends h; the failure aborts task
// 0's rendezvous, which fails task 1's pull, so task 1 does not hang either.
TEST_F(TwoTasks, AFailureOnOneTaskFailsThePeerInsteadOfHangingIt) {
  absl::Status s0, s1;
  RunGraphResponse r0, r1;
  RunStep(9, weft::testing::FloatTensor({1}, {1}), &s0, &s1, &r0, &r1);
  EXPECT_EQ(s0.code(), absl::StatusCode::kInvalidArgument) << s0;
  EXPECT_EQ(s1.code(), absl::StatusCode::kInvalidArgument) << s1;
  EXPECT_TRUE(absl::StrContains(s1.message(), "feed 'x'")) << s1;
}

TEST_F(TwoTasks, RecvTensorChecksTheKeysTaskAndIncarnation) {
  auto recv = [&](Worker* w, const std::string& key, const std::string& caller = "") {
    RecvTensorRequest r;
    r.set_step_id(1);
    r.set_rendezvous_key(key);
    absl::Status out;
    w->RecvTensorAsync(&r, caller, [&](const absl::Status& s, const Tensor&, bool) { out = s; });
    return out;
  };
  absl::Status s = recv(w0_.get(), RendezvousKey(kTask1Cpu, 0, kTask0Cpu, "a:0", 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = recv(w0_.get(), RendezvousKey(kTask0Cpu, w0_->incarnation() + 1, kTask1Cpu, "a:0", 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_EQ(recv(w0_.get(), "garbage").code(), absl::StatusCode::kInvalidArgument);
  // An authenticated task reads only what is sent to it.
  s = recv(w0_.get(), RendezvousKey(kTask0Cpu, 0, kTask1Cpu, "a:0", 1), "/job:worker/task:2");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "task /job:worker/task:2 asked for 'a:0'")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), kTask1Cpu)) << s;
}

TEST_F(TwoTasks, ShutdownFailsABlockedStepAndLaterCalls) {
  req1_.set_step_id(3);
  absl::Notification finished;
  absl::Status s1;
  RunGraphResponse r1;
  lw1_->RunGraphAsync(&req1_, &r1, absl::InfiniteDuration(), [&](const absl::Status& s) {
    s1 = s;
    finished.Notify();
  });
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "task 1's _Recv to pull from task 0",
                        [&] { return w0_->rendezvous_mgr()->NumSteps() > 0; }));
  w1_->Shutdown();  // returns only once the step has
  ASSERT_TRUE(finished.HasBeenNotified());
  EXPECT_EQ(s1.code(), absl::StatusCode::kUnavailable) << s1;
  RunGraphResponse again;
  EXPECT_EQ(Run(lw1_.get(), req1_, &again).code(), absl::StatusCode::kUnavailable);
}

// The master's cluster rides on RegisterGraph: the worker checks it and
// hands it on (once per change) before it registers the graph; a malformed
// cluster, or one without this task, is refused and registers nothing.
TEST(WorkerClusterTest, RegisterGraphAppliesItsClusterAndRefusesABadOne) {
  std::vector<ClusterDef> applied;
  WorkerOptions o = Options(0);
  o.set_cluster = [&](const ClusterDef& c) { applied.push_back(c); };
  Worker w(o);
  LocalWorker lw(&w);
  auto split = testing::BuildSplitGraph(2, 2, 2, /*seed=*/1);
  ASSERT_TRUE(split.ok()) << split.status();
  auto register_with = [&](const std::string& cluster_flag) {
    RegisterGraphRequest req = MakeRegisterRequest(split->part0, {"x"}, {"z"});
    if (!cluster_flag.empty()) {
      absl::StatusOr<ClusterDef> cluster = ParseClusterFlag(cluster_flag);
      EXPECT_TRUE(cluster.ok()) << cluster.status();
      *req.mutable_cluster() = *cluster;
    }
    RegisterGraphResponse resp;
    return WaitFor([&](StatusCallback d) { lw.RegisterGraphAsync(&req, &resp, d); });
  };
  const std::string cluster = "worker=127.0.0.1:40001,127.0.0.1:40002;ps=127.0.0.1:40003";
  ASSERT_TRUE(register_with(cluster).ok());
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(ClusterToFlag(applied[0]), cluster);
  EXPECT_EQ(w.NumGraphs(), 1);
  // The same cluster again changes nothing; none leaves it as it was.
  ASSERT_TRUE(register_with(cluster).ok());
  ASSERT_TRUE(register_with("").ok());
  EXPECT_EQ(applied.size(), 1u);
  // A peer restarted elsewhere: the new cluster replaces the old.
  const std::string moved = "worker=127.0.0.1:40001,127.0.0.1:40012;ps=127.0.0.1:40003";
  ASSERT_TRUE(register_with(moved).ok());
  ASSERT_EQ(applied.size(), 2u);
  EXPECT_EQ(ClusterToFlag(applied[1]), moved);
  EXPECT_EQ(w.NumGraphs(), 4);

  // Clusters no parser would make: built by hand, as a faulty master might.
  struct Bad {
    ClusterDef cluster;
    std::string expect;
  };
  std::vector<Bad> bad(3);
  bad[0].expect = "'no-port' is not host:port";
  JobDef* job = bad[0].cluster.add_job();
  job->set_name("worker");
  (*job->mutable_tasks())[0] = "127.0.0.1:40001";
  (*job->mutable_tasks())[1] = "no-port";
  bad[1].expect = "has no address for this task, /job:worker/task:0";
  job = bad[1].cluster.add_job();
  job->set_name("ps");
  (*job->mutable_tasks())[0] = "127.0.0.1:40003";
  bad[2].expect = "job name 'Worker'";
  job = bad[2].cluster.add_job();
  job->set_name("Worker");
  (*job->mutable_tasks())[0] = "127.0.0.1:40001";
  for (const Bad& b : bad) {
    RegisterGraphRequest req = MakeRegisterRequest(split->part0, {"x"}, {"z"});
    *req.mutable_cluster() = b.cluster;
    RegisterGraphResponse resp;
    absl::Status s = WaitFor([&](StatusCallback d) { lw.RegisterGraphAsync(&req, &resp, d); });
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), b.expect)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "the cluster sent with RegisterGraph")) << s;
  }
  EXPECT_EQ(applied.size(), 2u);
  EXPECT_EQ(w.NumGraphs(), 4);
}


// A worker with small quotas, for the tests of each.
class QuotaTest : public ::testing::Test {
 protected:
  QuotaTest() {
    WorkerOptions o = Options(0);
    o.limits.max_sessions = 2;
    o.limits.max_graphs = 3;
    o.limits.max_graphs_per_session = 2;
    o.limits.max_iterations = 5;
    o.limits.memory_budget = 1 << 20;
    w_ = std::make_unique<Worker>(o);
    lw_ = std::make_unique<LocalWorker>(w_.get());
  }
  static GraphDef ConstGraph() {
    Graph g;
    GraphBuilder b(&g);
    b.Const(weft::testing::FloatTensor({1}, {7}), "c");
    EXPECT_TRUE(b.status().ok()) << b.status();
    return g.ToGraphDef();
  }
  absl::StatusOr<std::string> Register(const std::string& session, const GraphDef& graph = ConstGraph()) {
    RegisterGraphRequest req = MakeRegisterRequest(graph, {}, {"c"});
    req.set_session_handle(session);
    RegisterGraphResponse resp;
    absl::Status s = WaitFor([&](StatusCallback d) { lw_->RegisterGraphAsync(&req, &resp, d); });
    if (!s.ok()) return s;
    return resp.graph_handle();
  }
  absl::Status Deregister(const std::string& session, const std::string& handle) {
    DeregisterGraphRequest req;
    req.set_session_handle(session);
    req.set_graph_handle(handle);
    DeregisterGraphResponse resp;
    return WaitFor([&](StatusCallback d) { lw_->DeregisterGraphAsync(&req, &resp, d); });
  }
  absl::Status Run(const std::string& session, const std::string& handle, int iterations) {
    RunGraphRequest req;
    req.set_session_handle(session);
    req.set_graph_handle(handle);
    req.set_step_id(1);
    req.set_iterations(iterations);
    RunGraphResponse resp;
    return WaitFor([&](StatusCallback d) { lw_->RunGraphAsync(&req, &resp, absl::InfiniteDuration(), d); });
  }
  static void ExpectQuota(const absl::Status& s, const std::string& flag) {
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_NE(std::string(s.message()).find(flag), std::string::npos) << s;
  }
  std::unique_ptr<Worker> w_;
  std::unique_ptr<LocalWorker> lw_;
};

TEST_F(QuotaTest, GraphsPerSessionSessionsAndGraphsPerTask) {
  auto a1 = Register("a");
  auto a2 = Register("a");
  ASSERT_TRUE(a1.ok() && a2.ok()) << a1.status() << a2.status();
  ExpectQuota(Register("a").status(), "--max_graphs_per_session");
  auto b1 = Register("b");
  ASSERT_TRUE(b1.ok()) << b1.status();
  ExpectQuota(Register("c").status(), "--max_graphs");  // 3 graphs: the task's quota first
  ASSERT_TRUE(Deregister("a", *a2).ok());
  ExpectQuota(Register("c").status(), "--max_sessions");  // a and b are live
  // The refusals disturbed nothing: the graphs registered before still run,
  // and a legitimate registration within the quotas still works.
  EXPECT_TRUE(Run("a", *a1, 1).ok());
  EXPECT_TRUE(Run("b", *b1, 1).ok());
  EXPECT_TRUE(Register("b").ok());
  EXPECT_EQ(w_->NumGraphs(), 3);
}

TEST_F(QuotaTest, IterationsAboveTheCapAreRefused) {
  auto h = Register("a");
  ASSERT_TRUE(h.ok()) << h.status();
  ExpectQuota(Run("a", *h, 6), "--max_iterations");
  ExpectQuota(Run("a", *h, std::numeric_limits<int32_t>::max()), "--max_iterations");
  EXPECT_TRUE(Run("a", *h, 5).ok());
}

TEST_F(QuotaTest, AGraphDeclaringMoreThanTheMemoryBudgetIsRefusedNamingTheNode) {
  Graph g;
  GraphBuilder b(&g);
  b.Variable("huge", DType::kFloat32, {1024, 1024}, "zeros");  // 4 MiB > the 1 MiB budget
  b.Const(weft::testing::FloatTensor({1}, {7}), "c");
  ASSERT_TRUE(b.status().ok()) << b.status();
  absl::StatusOr<std::string> h = Register("a", g.ToGraphDef());
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), absl::StatusCode::kResourceExhausted) << h.status();
  EXPECT_NE(std::string(h.status().message()).find("'huge'"), std::string::npos) << h.status();
  EXPECT_NE(std::string(h.status().message()).find("4194304"), std::string::npos) << h.status();
  EXPECT_EQ(w_->NumGraphs(), 0);
  EXPECT_TRUE(w_->VariableNames().empty());
  EXPECT_TRUE(Register("a").ok());
}

TEST_F(QuotaTest, ShutdownEndsARunGraphBlockedOnARecv) {
  Graph g;
  GraphBuilder b(&g);
  b.set_device(kTask0Cpu);
  // A _Recv of a value this task sends nowhere: the step waits for ever.
  b.Op("_Recv", {},
       {Attr("tensor_type", DType::kFloat32), Attr("tensor_name", std::string("never")),
        Attr("send_device", std::string(kTask0Cpu)), Attr("send_device_incarnation", int64_t{0}),
        Attr("recv_device", std::string(kTask0Cpu)), Attr("client_terminated", false),
        Attr("shape", TensorShape({1}))},
       "c");
  ASSERT_TRUE(b.status().ok()) << b.status();
  auto h = Register("a", g.ToGraphDef());
  ASSERT_TRUE(h.ok()) << h.status();
  RunGraphRequest req;
  req.set_session_handle("a");
  req.set_graph_handle(*h);
  req.set_step_id(1);
  RunGraphResponse resp;
  absl::Notification done;
  absl::Status status;
  lw_->RunGraphAsync(&req, &resp, absl::InfiniteDuration(), [&](const absl::Status& s) {
    status = s;
    done.Notify();
  });
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "the step to start", [&] { return w_->rendezvous_mgr()->NumSteps() == 1; }));
  EXPECT_FALSE(done.HasBeenNotified());
  w_->Shutdown();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kWaitTimeout)) << "RunGraph never returned after Shutdown";
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
}

}  // namespace
}  // namespace worker
}  // namespace weft
