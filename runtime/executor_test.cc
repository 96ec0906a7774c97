#include "runtime/executor.h"

#include <atomic>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "graph/builder.h"
#include "gtest/gtest.h"
#include "runtime/op_kernel.h"
#include "runtime/rendezvous.h"

namespace weft {
namespace {

// A gate that test kernels share: TestGateWait finishes only once
// TestGateOpen has run, and it is completed from another thread, as a
// _Recv is by an RPC thread.
struct Gate {
  absl::Mutex mu;
  bool open ABSL_GUARDED_BY(mu) = false;
  std::vector<std::function<void()>> waiters ABSL_GUARDED_BY(mu);
  std::vector<std::thread> threads;
  void Reset() {
    for (auto& t : threads) t.join();
    threads.clear();
    absl::MutexLock lock(&mu);
    open = false;
  }
};
Gate& TheGate() {
  static Gate* g = new Gate();
  return *g;
}

class GateWaitOp : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    auto finish = [ctx, done] {
      *ctx->allocate_output(0, DType::kFloat32, {})->data<float>() = 1.0f;
      done();
    };
    Gate& g = TheGate();
    absl::MutexLock lock(&g.mu);
    if (g.open) {
      g.threads.emplace_back(finish);
    } else {
      g.waiters.push_back(finish);
    }
  }
};

class GateOpenOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext*) override {
    Gate& g = TheGate();
    absl::MutexLock lock(&g.mu);
    g.open = true;
    for (auto& w : g.waiters) g.threads.emplace_back(std::move(w));
    g.waiters.clear();
  }
};

absl::Status ScalarOut(InferenceContext* c) { return ScalarFloatShape(c); }
absl::Status NoOut(InferenceContext*) { return absl::OkStatus(); }
WEFT_REGISTER_OP(OpDef{.name = "TestGateWait", .num_inputs = 0, .num_outputs = 1, .stateful = true,
                       .shape_fn = ScalarOut});
WEFT_REGISTER_OP(OpDef{.name = "TestGateOpen", .num_inputs = 0, .num_outputs = 0, .stateful = true,
                       .shape_fn = NoOut});
WEFT_REGISTER_KERNEL("TestGateWait", "CPU", GateWaitOp);
WEFT_REGISTER_KERNEL("TestGateOpen", "CPU", GateOpenOp);

// Kernels that break the rules, for the executor's last line of defence:
// they throw (attr "what": "bad_alloc", "runtime_error" or "int") or ask
// allocate_output for more than any machine has.
void ThrowAsTold(const Node& node) {
  const std::string what = GetStringAttrOr(node.def(), "what", "bad_alloc").value_or("");
  if (what == "bad_alloc") throw std::bad_alloc();
  if (what == "runtime_error") throw std::runtime_error("a library said no");
  throw 7;
}
class ThrowingOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext*) override { ThrowAsTold(node()); }
};
class ThrowingAsyncOp : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;
  void ComputeAsync(OpKernelContext*, DoneCallback) override { ThrowAsTold(node()); }
};
class HugeOutputOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    // 2^40 x 2^22 floats: 2^62 elements, whose 2^64 bytes would wrap size_t.
    EXPECT_EQ(ctx->allocate_output(0, DType::kFloat32, {int64_t{1} << 40, int64_t{1} << 22}), nullptr);
  }
};
class LargeOutputOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    // 2^40 x 4 floats: 16 TiB, which fits size_t but no machine's memory.
    EXPECT_EQ(ctx->allocate_output(0, DType::kFloat32, {int64_t{1} << 40, 4}), nullptr);
  }
};
WEFT_REGISTER_OP(OpDef{.name = "TestThrow", .num_inputs = 0, .num_outputs = 1, .stateful = true,
                       .shape_fn = ScalarOut});
WEFT_REGISTER_OP(OpDef{.name = "TestThrowAsync", .num_inputs = 0, .num_outputs = 1, .stateful = true,
                       .shape_fn = ScalarOut});
WEFT_REGISTER_OP(OpDef{.name = "TestHugeOutput", .num_inputs = 0, .num_outputs = 1, .stateful = true,
                       .shape_fn = ScalarOut});
WEFT_REGISTER_OP(OpDef{.name = "TestLargeOutput", .num_inputs = 0, .num_outputs = 1, .stateful = true,
                       .shape_fn = ScalarOut});
WEFT_REGISTER_KERNEL("TestThrow", "CPU", ThrowingOp);
WEFT_REGISTER_KERNEL("TestThrowAsync", "CPU", ThrowingAsyncOp);
WEFT_REGISTER_KERNEL("TestHugeOutput", "CPU", HugeOutputOp);
WEFT_REGISTER_KERNEL("TestLargeOutput", "CPU", LargeOutputOp);

// Kernels for commit nodes (kCommitAttr). TestFail fails with its attr
// "message", counting its calls; TestAwaitAbort finishes, with OK, only once
// the step's rendezvous is aborted, which the executor does only after it
// has marked the step aborted: whatever waits on it runs after the abort,
// in every mode and on every thread interleaving.
std::atomic<int> fail_calls{0};
class FailOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    fail_calls.fetch_add(1);
    ctx->SetStatus(absl::InternalError(GetStringAttrOr(node().def(), "message", "failed").value_or("")));
  }
};
class AwaitAbortOp : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    ctx->rendezvous()->RecvAsync(absl::StrCat("never_sent;", ctx->step_id()),
                                 [done = std::move(done)](const absl::Status& s, const Tensor&, bool) {
                                   EXPECT_FALSE(s.ok()) << "nothing sends this key";
                                   done();
                                 });
  }
};
WEFT_REGISTER_OP(OpDef{.name = "TestFail", .num_inputs = 0, .num_outputs = 0, .stateful = true, .shape_fn = NoOut});
WEFT_REGISTER_OP(OpDef{.name = "TestAwaitAbort", .num_inputs = 0, .num_outputs = 0, .stateful = true,
                       .shape_fn = NoOut});
WEFT_REGISTER_KERNEL("TestFail", "CPU", FailOp);
WEFT_REGISTER_KERNEL("TestAwaitAbort", "CPU", AwaitAbortOp);

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

Tensor Filled(const TensorShape& shape, float v) {
  Tensor t(DType::kFloat32, shape);
  for (float& x : t.flat<float>()) x = v;
  return t;
}

class ExecutorTest : public ::testing::Test {
 protected:
  Graph g_;
  GraphBuilder b_{&g_};
  CpuDevice device_{"/device:CPU:0", 1};
};

TEST_F(ExecutorTest, PrunesToFetchesAndCutsAtFeeds) {
  Output x = b_.Placeholder(DType::kFloat32, {2, 2}, "x");
  Output never = b_.Placeholder(DType::kFloat32, {2, 2}, "never_fed");
  Output y = b_.Op("Relu", {x}, {}, "y");
  b_.Op("Relu", {never}, {}, "other_branch");
  b_.Op("Add", {y, y}, {}, "z");
  ASSERT_TRUE(b_.status().ok()) << b_.status();

  // Fetching z needs x and y, never the unfed placeholder of the other branch.
  auto out = RunGraphOnce(g_, &device_, {{"x", Filled({2, 2}, -1.0f)}}, {"z"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].data<float>()[0], 0.0f);

  // Feeding y cuts x away: x is not fed, yet the step runs.
  out = RunGraphOnce(g_, &device_, {{"y", Filled({2, 2}, 3.0f)}}, {"z", "y"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].data<float>()[3], 6.0f);
  EXPECT_EQ((*out)[1].data<float>()[3], 3.0f);  // a fed tensor can be fetched
}

TEST_F(ExecutorTest, ErrorsNameTheNode) {
  Output p = b_.Placeholder(DType::kFloat32, {2}, "p");
  b_.Op("Relu", {p}, {}, "r");
  ASSERT_TRUE(b_.status().ok());
  auto out = RunGraphOnce(g_, &device_, {}, {"r"});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(Msg(out.status()).find("'p' (Placeholder)"), std::string::npos) << out.status();
  EXPECT_NE(Msg(out.status()).find("must be fed"), std::string::npos) << out.status();

  auto missing = RunGraphOnce(g_, &device_, {}, {"nope"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(Msg(missing.status()).find("nope"), std::string::npos);
}

TEST_F(ExecutorTest, RejectsFeedsOfWrongDtypeOrShape) {
  b_.Op("Relu", {b_.Placeholder(DType::kFloat32, {-1, 3}, "x")}, {}, "r");
  ExecutorOptions opts;
  opts.feeds = {"x"};
  opts.fetches = {"r"};
  auto exec = Executor::Create(&g_, &device_, opts);
  ASSERT_TRUE(exec.ok()) << exec.status();
  std::vector<Tensor> out;
  const Tensor wrong_shape[] = {Filled({5, 4}, 1)};
  absl::Status s = (*exec)->Run(wrong_shape, &out);
  EXPECT_NE(Msg(s).find("feed 'x' must be float32[?,3], got float32[5,4]"), std::string::npos) << s;
  const Tensor wrong_type[] = {Tensor(DType::kInt32, {5, 3})};
  EXPECT_FALSE((*exec)->Run(wrong_type, &out).ok());
  const Tensor good[] = {Filled({5, 3}, 2)};
  ASSERT_TRUE((*exec)->Run(good, &out).ok());
  EXPECT_EQ(out[0].shape(), TensorShape({5, 3}));
}

TEST_F(ExecutorTest, ConcurrentRunsOnAPoolGiveEachCallerItsOwnResult) {
  // A wide graph: 8 independent chains summed, so the pool has parallel work.
  Output x = b_.Placeholder(DType::kFloat32, {16, 16}, "x");
  Output w = b_.Const(Filled({16, 16}, 0.5f), "w");
  std::vector<Output> chains;
  for (int c = 0; c < 8; ++c) chains.push_back(b_.Op("Relu", {b_.Op("MatMul", {x, w})}));
  b_.Op("AddN", chains, {}, "sum");
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  ThreadPool pool("inter_op", 4);
  ExecutorOptions opts;
  opts.feeds = {"x"};
  opts.fetches = {"sum"};
  opts.inter_op_pool = &pool;
  auto exec = Executor::Create(&g_, &device_, opts);
  ASSERT_TRUE(exec.ok()) << exec.status();

  std::vector<std::thread> callers;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const float v = static_cast<float>(t * 100 + i);
        const Tensor feeds[] = {Filled({16, 16}, v)};
        std::vector<Tensor> out;
        if (!(*exec)->Run(feeds, &out, i).ok()) {
          ++wrong[t];
          continue;
        }
        // Every element: 8 chains * 16 * v * 0.5.
        if (out[0].data<float>()[37] != 8 * 16 * v * 0.5f) ++wrong[t];
      }
    });
  }
  for (auto& c : callers) c.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(wrong[t], 0) << "caller " << t;
}

TEST_F(ExecutorTest, FailureInOneBranchAbortsTheParallelStep) {
  Output p = b_.Placeholder(DType::kFloat32, {4}, "unfed");
  Output x = b_.Placeholder(DType::kFloat32, {4}, "x");
  std::vector<Output> parts;
  for (int i = 0; i < 6; ++i) parts.push_back(b_.Op("Relu", {x}));
  parts.push_back(b_.Op("Relu", {p}));
  b_.Op("AddN", parts, {}, "sum");
  ThreadPool pool("inter_op", 3);
  ExecutorOptions opts;
  opts.feeds = {"x"};
  opts.fetches = {"sum"};
  opts.inter_op_pool = &pool;
  auto exec = Executor::Create(&g_, &device_, opts);
  ASSERT_TRUE(exec.ok()) << exec.status();
  for (int i = 0; i < 20; ++i) {
    const Tensor feeds[] = {Filled({4}, 1)};
    std::vector<Tensor> out;
    absl::Status s = (*exec)->Run(feeds, &out);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(Msg(s).find("unfed"), std::string::npos) << s;
  }
}

TEST_F(ExecutorTest, AsyncKernelWaitingOnItsOwnGraphDoesNotBlockIt) {
  // The waiting node comes first, so a kernel that blocked its thread would
  // keep the opener from ever running: the step would hang.
  Output waited = b_.Op("TestGateWait", {}, {}, "wait");
  b_.Op("Relu", {waited}, {}, "after");
  b_.AddNode("TestGateOpen", {}, {}, "open");
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  ThreadPool pool("inter_op", 1);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    ExecutorOptions opts;
    opts.fetches = {"after"};
    opts.targets = {"open"};
    opts.inter_op_pool = p;
    auto exec = Executor::Create(&g_, &device_, opts);
    ASSERT_TRUE(exec.ok()) << exec.status();
    for (int step = 0; step < 20; ++step) {
      TheGate().Reset();
      std::vector<Tensor> out;
      ASSERT_TRUE((*exec)->Run({}, &out, step).ok()) << (p ? "pool" : "inline");
      EXPECT_EQ(out[0].data<float>()[0], 1.0f);
    }
  }
  TheGate().Reset();
}

TEST_F(ExecutorTest, WarmStepsAllocateNothingNew) {
  Output x = b_.Placeholder(DType::kFloat32, {-1, 64}, "x");
  Output w = b_.Variable("w", DType::kFloat32, {64, 32}, "glorot_uniform", 1);
  Output h = b_.Op("Relu", {b_.Op("MatMul", {x, w})});
  Output loss = b_.Op("Mean", {h}, {}, "loss");
  Output g = b_.Op("MatMul", {x, b_.Op("ReluGrad", {h, h})}, {Attr("transpose_a", true)});
  b_.AddNode("ApplyGradientDescent", {w, g}, {Attr("learning_rate", 0.001f)}, "update", {loss.node});
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  ExecutorOptions opts;
  opts.feeds = {"x"};
  opts.fetches = {"loss"};
  opts.targets = {"update"};
  auto exec = Executor::Create(&g_, &device_, opts);
  ASSERT_TRUE(exec.ok()) << exec.status();
  const Tensor feeds[] = {Filled({32, 64}, 0.25f)};
  std::vector<Tensor> out;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*exec)->Run(feeds, &out, i).ok());
  const float first_loss = out[0].data<float>()[0];
  const int64_t warm = CpuAllocator()->GetStats().system_allocs;
  for (int i = 3; i < 30; ++i) ASSERT_TRUE((*exec)->Run(feeds, &out, i).ok());
  EXPECT_EQ(CpuAllocator()->GetStats().system_allocs, warm);
  EXPECT_NE(out[0].data<float>()[0], first_loss);  // the update changed the variable
}

TEST_F(ExecutorTest, KernelExceptionsBecomeErrorsNamingTheNode) {
  struct Case {
    const char* op;
    const char* what;
    absl::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"TestThrow", "bad_alloc", absl::StatusCode::kResourceExhausted, "out of memory"},
      {"TestThrow", "runtime_error", absl::StatusCode::kInternal, "a library said no"},
      {"TestThrow", "int", absl::StatusCode::kInternal, "non-standard exception"},
      {"TestThrowAsync", "bad_alloc", absl::StatusCode::kResourceExhausted, "out of memory"},
      {"TestThrowAsync", "runtime_error", absl::StatusCode::kInternal, "a library said no"},
  };
  int n = 0;
  for (const Case& c : cases) {
    const std::string name = absl::StrCat("thrower", n++);
    Output t = b_.Op(c.op, {}, {Attr("what", c.what)}, name);
    ASSERT_TRUE(b_.status().ok()) << b_.status();
    auto out = RunGraphOnce(g_, &device_, {}, {t.name()});
    ASSERT_FALSE(out.ok()) << c.op << " " << c.what;
    EXPECT_EQ(out.status().code(), c.code) << out.status();
    EXPECT_NE(Msg(out.status()).find(absl::StrCat("'", name, "' (", c.op, ")")), std::string::npos) << out.status();
    EXPECT_NE(Msg(out.status()).find(c.message), std::string::npos) << out.status();
  }
}

TEST_F(ExecutorTest, AllocateOutputFailureNamesNodeOutputShapeAndBytes) {
  b_.Op("TestLargeOutput", {}, {}, "big");
  b_.Op("TestHugeOutput", {}, {}, "huge");
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  auto big = RunGraphOnce(g_, &device_, {}, {"big"});
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  for (const char* part :
       {"node 'big' (TestLargeOutput): output 0", "float32[1099511627776,4]", "17592186044416 bytes"}) {
    EXPECT_NE(Msg(big.status()).find(part), std::string::npos) << part << " in " << big.status();
  }
  // Named once, not once by allocate_output and again by the executor.
  EXPECT_EQ(Msg(big.status()).find("'big'"), Msg(big.status()).rfind("'big'")) << big.status();

  auto huge = RunGraphOnce(g_, &device_, {}, {"huge"});
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument) << huge.status();
  EXPECT_NE(Msg(huge.status()).find("node 'huge' (TestHugeOutput): output 0"), std::string::npos) << huge.status();
  EXPECT_NE(Msg(huge.status()).find("overflow"), std::string::npos) << huge.status();
}

// The master's all-or-nothing update on one worker: v1 += 1 and v2 += 2
// behind a barrier whose control inputs are every input of the updates,
// then step += 1 after both; all of them commit nodes. v3 belongs to nodes
// that are not.
class CommitTest : public ExecutorTest {
 protected:
  void SetUp() override {
    fail_calls = 0;
    v1_ = b_.Variable("v1", DType::kFloat32, {}, "zeros");
    v2_ = b_.Variable("v2", DType::kFloat32, {}, "zeros");
    step_ = b_.Variable("step", DType::kFloat32, {}, "zeros");
    v3_ = b_.Variable("v3", DType::kFloat32, {}, "zeros");
    g1_ = b_.ScalarConst(1.0f, "g1");
    g2_ = b_.ScalarConst(2.0f, "g2");
    one_ = b_.ScalarConst(1.0f, "one");
  }

  // The barrier, waiting also on `more`.
  Node* Barrier(std::vector<Node*> more = {}) {
    for (const Output& in : {v1_, v2_, step_, g1_, g2_, one_}) more.push_back(in.node);
    return b_.AddNode("NoOp", {}, {Commit()}, "barrier", more);
  }
  // The two updates after `after` (the barrier, and whatever else), then the
  // counter; returns the updates.
  std::vector<Node*> Updates(const std::vector<Node*>& after) {
    Node* u1 = b_.AddNode("AssignAdd", {v1_, g1_}, {Commit()}, "update1", after);
    Node* u2 = b_.AddNode("AssignAdd", {v2_, g2_}, {Commit()}, "update2", after);
    b_.AddNode("AssignAdd", {step_, one_}, {Commit()}, "count", {u1, u2});
    return {u1, u2};
  }
  static std::pair<std::string, AttrValue> Commit() { return Attr(kCommitAttr, true); }

  // {v1, v2, step, v3} now.
  std::vector<float> Values() {
    ExecutorOptions opts;
    opts.fetches = {"v1", "v2", "step", "v3"};
    auto exec = Executor::Create(&g_, &device_, opts);
    EXPECT_TRUE(exec.ok()) << exec.status();
    std::vector<Tensor> out;
    absl::Status s = (*exec)->Run({}, &out);
    EXPECT_TRUE(s.ok()) << s;
    std::vector<float> values;
    for (const Tensor& t : out) values.push_back(t.data<float>()[0]);
    return values;
  }

  // Runs `steps` steps of an executor for `targets` in each mode: inline
  // (the graphs have async kernels, so RunInlineWithAsync) and on pools of
  // one and of four threads. Each step gets its own rendezvous; `check`
  // sees its status and the values before and after it.
  void RunInEveryMode(const std::vector<std::string>& targets, int steps,
                      const std::function<void(const absl::Status&, const std::vector<float>& before,
                                               const std::vector<float>& after)>& check) {
    ASSERT_TRUE(b_.status().ok()) << b_.status();
    ThreadPool one("inter_op", 1);
    ThreadPool four("inter_op", 4);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &one, &four}) {
      SCOPED_TRACE(pool == nullptr ? "inline" : absl::StrCat("pool of ", pool->num_threads()));
      ExecutorOptions opts;
      opts.targets = targets;
      opts.inter_op_pool = pool;
      auto exec = Executor::Create(&g_, &device_, opts);
      ASSERT_TRUE(exec.ok()) << exec.status();
      for (int step = 0; step < steps; ++step) {
        const std::vector<float> before = Values();
        LocalRendezvous rendezvous;
        const absl::Status s = (*exec)->Run({}, nullptr, step, &rendezvous);
        check(s, before, Values());
      }
    }
  }

  Output v1_, v2_, step_, v3_, g1_, g2_, one_;
};

TEST_F(CommitTest, AStepThatDoesNotAbortRunsCommitNodesAsAnyOther) {
  Updates({Barrier()});
  RunInEveryMode({"count"}, 3, [](const absl::Status& s, const std::vector<float>& before,
                                  const std::vector<float>& after) {
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(after[0] - before[0], 1.0f);
    EXPECT_EQ(after[1] - before[1], 2.0f);
    EXPECT_EQ(after[2] - before[2], 1.0f);
  });
}

TEST_F(CommitTest, AnAbortAfterTheBarrierRanStillAppliesEveryUpdate) {
  // "fail" aborts the step once the barrier has run (a peer died); the
  // updates also wait for "hold", which finishes only after the abort, so
  // they are surely made ready and run after it. Non-commit successors of
  // the commit nodes never run: after_update and after_count would add to
  // v3.
  Node* barrier = Barrier();
  b_.AddNode("TestFail", {}, {Attr("message", "peer died")}, "fail", {barrier});
  Node* hold = b_.AddNode("TestAwaitAbort", {}, {Commit()}, "hold", {barrier});
  std::vector<Node*> updates = Updates({barrier, hold});
  b_.AddNode("AssignAdd", {v3_, g1_}, {}, "after_update", {updates[0]});
  b_.AddNode("AssignAdd", {v3_, g2_}, {}, "after_count", {g_.FindNode("count")});
  RunInEveryMode({"after_update", "after_count", "fail"}, 20,
                 [](const absl::Status& s, const std::vector<float>& before, const std::vector<float>& after) {
                   // The step's error is still the abort's.
                   EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
                   EXPECT_NE(Msg(s).find("'fail' (TestFail): peer died"), std::string::npos) << s;
                   EXPECT_EQ(after[0] - before[0], 1.0f) << "update1";
                   EXPECT_EQ(after[1] - before[1], 2.0f) << "update2";
                   EXPECT_EQ(after[2] - before[2], 1.0f) << "count";
                   EXPECT_EQ(after[3], before[3]) << "a non-commit node ran after the abort";
                 });
}

TEST_F(CommitTest, AnAbortBeforeTheBarrierRanAppliesNoUpdate) {
  // The barrier also waits for a gradient from a peer, which never comes:
  // "fail" aborts the step, which fails the blocked _Recv. A failed input
  // readies no commit successor, so the barrier, and with it every update,
  // never runs, although all its other inputs finished.
  Output recv = b_.Op("_Recv", {},
                      {Attr("tensor_name", "grad"), Attr("send_device", "/job:worker/task:1/device:CPU:0"),
                       Attr("recv_device", "/job:worker/task:0/device:CPU:0"), Attr("tensor_type", DType::kFloat32),
                       Attr("shape", TensorShape{})},
                      "recv");
  Updates({Barrier({recv.node})});
  b_.AddNode("TestFail", {}, {Attr("message", "peer died")}, "fail");
  RunInEveryMode({"count", "fail"}, 20,
                 [](const absl::Status& s, const std::vector<float>& before, const std::vector<float>& after) {
                   EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
                   EXPECT_NE(Msg(s).find("'fail' (TestFail): peer died"), std::string::npos) << s;
                   EXPECT_EQ(after, before) << "an update ran";
                 });
}

TEST_F(CommitTest, ACommitNodeFailingAfterTheAbortKeepsTheFirstErrorAndStopsItsSuccessors) {
  // After "first" aborts the step, "second" (a commit node) runs and fails:
  // the step keeps the first error, update1 (after "second") never runs,
  // update2 (after "hold" only) does.
  Node* barrier = Barrier();
  b_.AddNode("TestFail", {}, {Attr("message", "first")}, "fail", {barrier});
  Node* hold = b_.AddNode("TestAwaitAbort", {}, {Commit()}, "hold", {barrier});
  Node* second = b_.AddNode("TestFail", {}, {Commit(), Attr("message", "second")}, "late_fail", {hold});
  b_.AddNode("AssignAdd", {v1_, g1_}, {Commit()}, "update1", {second});
  b_.AddNode("AssignAdd", {v2_, g2_}, {Commit()}, "update2", {hold});
  RunInEveryMode({"update1", "update2", "fail"}, 20,
                 [](const absl::Status& s, const std::vector<float>& before, const std::vector<float>& after) {
                   const int calls = fail_calls.exchange(0);
                   EXPECT_EQ(calls, 2) << "both failing nodes run";
                   EXPECT_NE(Msg(s).find("'fail' (TestFail): first"), std::string::npos) << s;
                   EXPECT_EQ(Msg(s).find("second"), std::string::npos) << s;
                   EXPECT_EQ(after[0], before[0]) << "update1 ran after its input failed";
                   EXPECT_EQ(after[1] - before[1], 2.0f) << "update2";
                 });
}

TEST_F(CommitTest, ACommitAttrThatIsNotABoolNamesTheNode) {
  b_.AddNode("NoOp", {}, {Attr(kCommitAttr, 1)}, "barrier");
  ASSERT_TRUE(b_.status().ok()) << b_.status();
  ExecutorOptions opts;
  opts.targets = {"barrier"};
  auto exec = Executor::Create(&g_, &device_, opts);
  ASSERT_FALSE(exec.ok());
  EXPECT_EQ(exec.status().code(), absl::StatusCode::kInvalidArgument) << exec.status();
  EXPECT_NE(Msg(exec.status()).find("'barrier'"), std::string::npos) << exec.status();
  EXPECT_NE(Msg(exec.status()).find(kCommitAttr), std::string::npos) << exec.status();
}

}  // namespace
}  // namespace weft
