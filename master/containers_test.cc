// Variable containers through the Master: sessions of one owner share a
// container's variables across tasks' partitions, owners are isolated, Reset
// clears what its caller may clear, and bad names are refused naming the
// node.
#include "master/containers.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "common/tensor_proto_coding.h"
#include "graph/builder.h"
#include "gtest/gtest.h"
#include "master/fake_worker.h"
#include "master/in_process_cluster.h"
#include "master/master.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace master {
namespace {

constexpr char kPs[] = "/job:ps/task:0";
constexpr char kW0[] = "/job:worker/task:0";
constexpr absl::Duration kWait = absl::Seconds(60);

Caller User(const std::string& name, bool admin = false) {
  Caller c;
  c.kind = Caller::Kind::kUser;
  c.name = name;
  c.admin = admin;
  c.credential = "token";
  return c;
}

// v (ones [2], on the ps, in `container`); "update" adds 5 to it there;
// "read" reads it on worker 0.
GraphDef VarGraph(const std::string& container) {
  Graph g;
  GraphBuilder b(&g);
  b.set_device(kPs);
  Output v = b.Variable("v", DType::kFloat32, {2}, "ones");
  Output minus5 = b.Const(weft::testing::FloatTensor({2}, {-5, -5}), "minus5");
  b.Op("ApplyGradientDescent", {v, minus5}, {Attr("learning_rate", 1.0f)}, "update");
  b.set_device(kW0);
  b.Op("Identity", {v}, {}, "read");
  EXPECT_TRUE(b.status().ok()) << b.status();
  GraphDef def = g.ToGraphDef();
  for (NodeDef& n : *def.mutable_node()) {
    if (n.name() == "v") (*n.mutable_attr())["container"].set_s(container);
  }
  return def;
}

class MasterContainersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = InProcessCluster::Create({kPs, kW0});
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
    MasterOptions o;
    o.workers = cluster_->workers();
    master_ = std::make_unique<Master>(std::move(o));
  }
  void TearDown() override { master_.reset(); }

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
    if (!state->done.WaitForNotificationWithTimeout(kWait)) return absl::DeadlineExceededError("no answer");
    if (response != nullptr) *response = state->response;
    return state->status;
  }

  absl::StatusOr<std::string> CreateSession(const Caller& caller, const std::string& container = "c") {
    CreateSessionRequest req;
    *req.mutable_graph_def() = VarGraph(container);
    CreateSessionResponse resp;
    absl::Status s = Call(&Master::CreateSessionAsync, caller, req, &resp);
    if (!s.ok()) return s;
    return resp.session_handle();
  }
  absl::Status Update(const Caller& caller, const std::string& handle) {
    RunStepRequest req;
    req.set_session_handle(handle);
    req.add_target("update");
    return Call(&Master::RunStepAsync, caller, req);
  }
  // v[0] as the session reads it; -1 (and a failure) when the step fails.
  float Read(const Caller& caller, const std::string& handle) {
    RunStepRequest req;
    req.set_session_handle(handle);
    req.add_fetch("read");
    RunStepResponse resp;
    absl::Status s = Call(&Master::RunStepAsync, caller, req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok() || resp.tensor_size() != 1) return -1;
    return TensorFromProto(resp.tensor(0).tensor())->data<float>()[0];
  }
  absl::Status Close(const Caller& caller, const std::string& handle) {
    CloseSessionRequest req;
    req.set_session_handle(handle);
    return Call(&Master::CloseSessionAsync, caller, req);
  }
  absl::Status Reset(const Caller& caller, const std::vector<std::string>& containers) {
    ResetRequest req;
    for (const std::string& c : containers) req.add_container(c);
    return Call(&Master::ResetAsync, caller, req);
  }

  std::unique_ptr<InProcessCluster> cluster_;
  std::unique_ptr<Master> master_;
};

TEST_F(MasterContainersTest, AnOwnersSessionsShareAContainerAndOtherOwnersDoNot) {
  const Caller alice = User("alice"), bob = User("bob");
  auto a = CreateSession(alice), b = CreateSession(alice);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  ASSERT_TRUE(Update(alice, *a).ok());
  EXPECT_EQ(Read(alice, *b), 6.0f);
  // Closing the session that wrote it leaves the variable.
  ASSERT_TRUE(Close(alice, *a).ok());
  EXPECT_EQ(Read(alice, *b), 6.0f);
  // The tasks hold it under alice's name only.
  EXPECT_EQ(cluster_->worker(kPs)->containers().Names(), std::vector<std::string>{"alice/c"});

  // Bob's "c" is his own.
  auto c = CreateSession(bob);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(Read(bob, *c), 1.0f);
  ASSERT_TRUE(Update(bob, *c).ok());
  EXPECT_EQ(Read(bob, *c), 6.0f);
  EXPECT_EQ(Read(alice, *b), 6.0f);

  // Bob's Reset of "c" clears his, not alice's; sessions stay open.
  ASSERT_TRUE(Reset(bob, {"c"}).ok());
  EXPECT_EQ(Read(bob, *c), 1.0f);
  EXPECT_EQ(Read(alice, *b), 6.0f);
  // Alice's clears hers: the next read re-creates it from its initializer.
  ASSERT_TRUE(Reset(alice, {"c", "unused"}).ok());
  EXPECT_EQ(Read(alice, *b), 1.0f);
}

TEST_F(MasterContainersTest, AnAdminsResetClosesSessionsAndClearsEveryContainer) {
  const Caller alice = User("alice"), carol = User("carol", /*admin=*/true);
  auto a = CreateSession(alice);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(Update(alice, *a).ok());
  // A user may not reset everything; the refusal changed nothing.
  absl::Status s = Reset(alice, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_EQ(Read(alice, *a), 6.0f);

  ASSERT_TRUE(Reset(carol, {}).ok());
  EXPECT_EQ(Update(alice, *a).code(), absl::StatusCode::kNotFound);
  auto again = CreateSession(alice);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Read(alice, *again), 1.0f);
}

TEST_F(MasterContainersTest, BadContainerNamesAndCallersAreRefused) {
  const Caller alice = User("alice");
  for (const std::string& bad : {std::string("a/b"), std::string("a b"), std::string(65, 'x'),
                                 std::string("caf\xc3\xa9")}) {
    auto h = CreateSession(alice, bad);
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(h.status().message(), "variable node 'v'")) << h.status();
    EXPECT_TRUE(absl::StrContains(h.status().message(), "[A-Za-z0-9_.-]")) << h.status();
    absl::Status s = Reset(alice, {"ok", bad});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "Reset's container 1")) << s;
  }
  auto fine = CreateSession(alice, std::string(64, 'x'));
  EXPECT_TRUE(fine.ok()) << fine.status();
  // ExtendSession checks the nodes it adds.
  ExtendSessionRequest extend;
  extend.set_session_handle(*fine);
  *extend.mutable_graph_def() = VarGraph("no/slash");
  for (NodeDef& n : *extend.mutable_graph_def()->mutable_node()) n.set_name("more_" + n.name());
  absl::Status s = Call(&Master::ExtendSessionAsync, alice, extend);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "variable node 'more_v'")) << s;
  // A task is no user: it may not reset containers.
  Caller task;
  task.kind = Caller::Kind::kCluster;
  task.name = kW0;
  task.credential = "certificate";
  s = Reset(task, {"c"});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  // Too many names.
  s = Reset(alice, std::vector<std::string>(kMaxResetContainerNames + 1, "c"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST(ScopeContainersTest, OnlyVariablesThatNameAContainerAreRewritten) {
  GraphDef g = VarGraph("c");
  NodeDef* plain = g.add_node();
  plain->set_name("plain");
  plain->set_op("Variable");
  NodeDef* other = g.add_node();
  other->set_name("other");
  other->set_op("NoOp");
  (*other->mutable_attr())["container"].set_s("a/b");  // not a Variable: ignored
  ASSERT_TRUE(ScopeContainers("alice", &g).ok());
  for (const NodeDef& n : g.node()) {
    if (n.name() == "v") {
      EXPECT_EQ(n.attr().at("container").s(), "alice/c");
    }
    if (n.name() == "plain") {
      EXPECT_EQ(n.attr().count("container"), 0u);
    }
    if (n.name() == "other") {
      EXPECT_EQ(n.attr().at("container").s(), "a/b");
    }
  }
  // An insecure master has no owner; the name still cannot meet a user's.
  EXPECT_EQ(ScopedContainer("", "c"), "/c");
}

// Answers ResetContainers with `status`.
class ResettingWorker final : public FakeWorker {
 public:
  ResettingWorker(std::string task, absl::Status status) : FakeWorker(std::move(task)), status_(std::move(status)) {}
  void ResetContainersAsync(const ResetContainersRequest* request, ResetContainersResponse*,
                            StatusCallback done) override {
    last_all_ = request->all();
    done(status_);
  }
  bool last_all_ = false;

 private:
  const absl::Status status_;
};

class TwoTasks final : public WorkerCacheInterface {
 public:
  std::vector<std::string> ListTasks() const override { return {kPs, kW0}; }
  WorkerInterface* GetOrCreateWorker(const std::string& task) override {
    if (task == kPs) return &ps_;
    return task == kW0 ? &w0_ : nullptr;
  }
  ResettingWorker ps_{kPs, absl::OkStatus()};
  ResettingWorker w0_{kW0, absl::UnavailableError("connection refused")};
};

TEST(ResetContainersOnEveryTaskTest, AFailureNamesTheTaskThatCouldNotBeReached) {
  TwoTasks tasks;
  ResetContainersRequest req;
  req.set_all(true);
  absl::Status s = ResetContainersOnEveryTask(&tasks, req);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), kW0)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "connection refused")) << s;
  // Every task was asked, the one that answered too.
  EXPECT_TRUE(tasks.ps_.last_all_);
  EXPECT_TRUE(tasks.w0_.last_all_);
}

}  // namespace
}  // namespace master
}  // namespace weft
