// Variables in containers on one task: shared by sessions, outliving them,
// cleared by ResetContainers, bounded by --max_containers; ordinary
// variables stay per session.
#include "worker/resource_containers.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/tensor_proto_coding.h"
#include "graph/builder.h"
#include "gtest/gtest.h"
#include "runtime/testing/test_util.h"
#include "worker/local_worker.h"
#include "worker/worker.h"
#include "worker/worker_test_util.h"

namespace weft {
namespace worker {
namespace {

using testing::kTask0Cpu;
using testing::MakeRegisterRequest;
using testing::WaitFor;

// On task 0's CPU: v (container `container`) and u (none), both ones of
// shape [dim]; "update" adds 5 to each; "read_v" and "read_u" read them.
GraphDef VarGraph(const std::string& container, int64_t dim = 2) {
  Graph g;
  GraphBuilder b(&g);
  b.set_device(kTask0Cpu);
  Output v = b.Variable("v", DType::kFloat32, {dim}, "ones");
  Output u = b.Variable("u", DType::kFloat32, {dim}, "ones");
  Output minus5 = b.Const(weft::testing::FloatTensor({dim}, std::vector<float>(dim, -5.0f)), "minus5");
  b.Op("ApplyGradientDescent", {v, minus5}, {Attr("learning_rate", 1.0f)}, "add_v");
  b.Op("ApplyGradientDescent", {u, minus5}, {Attr("learning_rate", 1.0f)}, "add_u");
  b.Op("Identity", {v}, {}, "read_v");
  b.Op("Identity", {u}, {}, "read_u");
  b.Op("NoOp", {}, {}, "update");
  EXPECT_TRUE(b.status().ok()) << b.status();
  GraphDef def = g.ToGraphDef();
  for (NodeDef& n : *def.mutable_node()) {
    if (n.name() == "v" && !container.empty()) (*n.mutable_attr())["container"].set_s(container);
    if (n.name() == "update") {
      n.add_input("^add_v");
      n.add_input("^add_u");
    }
  }
  return def;
}

class ContainersTest : public ::testing::Test {
 protected:
  explicit ContainersTest(int max_containers = 1024) {
    WorkerOptions o;
    o.limits.max_containers = max_containers;
    worker_ = std::make_unique<Worker>(o);
    local_ = std::make_unique<LocalWorker>(worker_.get());
  }
  ~ContainersTest() override { worker_->Shutdown(); }

  // Registers VarGraph(container) in `session`: the update (`update`) or the
  // reads. Returns the graph handle.
  absl::StatusOr<std::string> Register(const std::string& session, const std::string& container, bool update = true,
                                       int64_t dim = 2) {
    RegisterGraphRequest req = update ? MakeRegisterRequest(VarGraph(container, dim), {}, {}, {"update"})
                                      : MakeRegisterRequest(VarGraph(container, dim), {}, {"read_v", "read_u"});
    req.set_session_handle(session);
    RegisterGraphResponse resp;
    absl::Status s = WaitFor([&](StatusCallback d) { local_->RegisterGraphAsync(&req, &resp, d); });
    if (!s.ok()) return s;
    return resp.graph_handle();
  }
  absl::Status Run(const std::string& session, const std::string& handle, RunGraphResponse* resp = nullptr) {
    RunGraphRequest req;
    req.set_session_handle(session);
    req.set_graph_handle(handle);
    req.set_step_id(++step_);
    RunGraphResponse ignored;
    return WaitFor([&](StatusCallback d) {
      local_->RunGraphAsync(&req, resp != nullptr ? resp : &ignored, absl::InfiniteDuration(), d);
    });
  }
  absl::Status Deregister(const std::string& session, const std::string& handle) {
    DeregisterGraphRequest req;
    req.set_session_handle(session);
    req.set_graph_handle(handle);
    DeregisterGraphResponse resp;
    return WaitFor([&](StatusCallback d) { local_->DeregisterGraphAsync(&req, &resp, d); });
  }
  // (v[0], u[0]) as `session` reads them through a graph registered for
  // the read alone; {-1, -1} (and a failure) when that fails.
  std::pair<float, float> Read(const std::string& session, const std::string& container = "alice/c") {
    auto h = Register(session, container, /*update=*/false);
    EXPECT_TRUE(h.ok()) << h.status();
    if (!h.ok()) return {-1, -1};
    RunGraphResponse resp;
    absl::Status s = Run(session, *h, &resp);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_TRUE(Deregister(session, *h).ok());
    if (!s.ok() || resp.recv_size() != 2) return {-1, -1};
    return {TensorFromProto(resp.recv(0).tensor())->data<float>()[0],
            TensorFromProto(resp.recv(1).tensor())->data<float>()[0]};
  }
  absl::StatusOr<int> Reset(std::vector<std::string> containers, bool all = false) {
    ResetContainersRequest req;
    for (const std::string& c : containers) req.add_container(c);
    req.set_all(all);
    ResetContainersResponse resp;
    absl::Status s = WaitFor([&](StatusCallback d) { local_->ResetContainersAsync(&req, &resp, d); });
    if (!s.ok()) return s;
    return resp.stores_cleared();
  }

  int64_t step_ = 0;
  std::unique_ptr<Worker> worker_;
  std::unique_ptr<LocalWorker> local_;
};

TEST_F(ContainersTest, SessionsShareAContainerVariableThatOutlivesThemUntilReset) {
  auto a = Register("session-a", "alice/c");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(Run("session-a", *a).ok());
  // Another session sees A's update of v, but its own u.
  EXPECT_EQ(Read("session-b"), std::make_pair(6.0f, 1.0f));
  // A's own u was updated.
  EXPECT_EQ(Read("session-a"), std::make_pair(6.0f, 6.0f));

  // A's last graph goes, and its session store with it; the container stays.
  ASSERT_TRUE(Deregister("session-a", *a).ok());
  EXPECT_EQ(worker_->NumGraphs(), 0);
  EXPECT_TRUE(worker_->VariableNames().empty());
  ASSERT_NE(worker_->containers().Find("alice/c", kTask0Cpu), nullptr);
  EXPECT_EQ(worker_->containers().Names(), std::vector<std::string>{"alice/c"});
  EXPECT_EQ(Read("session-c"), std::make_pair(6.0f, 1.0f));
  // Another container's v is another variable.
  EXPECT_EQ(Read("session-c", "bob/c").first, 1.0f);

  // Resetting another container leaves this one.
  auto cleared = Reset({"bob/c", "nobody/x"});
  ASSERT_TRUE(cleared.ok()) << cleared.status();
  EXPECT_EQ(*cleared, 1);
  EXPECT_EQ(Read("session-d").first, 6.0f);
  // Resetting it re-creates v from its initializer on the next read.
  cleared = Reset({"alice/c"});
  ASSERT_TRUE(cleared.ok()) << cleared.status();
  EXPECT_EQ(*cleared, 1);
  EXPECT_EQ(Read("session-d").first, 1.0f);
}

TEST_F(ContainersTest, AResetReachesAGraphThatStaysRegistered) {
  auto a = Register("session-a", "alice/c");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(Run("session-a", *a).ok());
  ASSERT_TRUE(Run("session-a", *a).ok());  // v: 11
  auto cleared = Reset({}, /*all=*/true);
  ASSERT_TRUE(cleared.ok()) << cleared.status();
  EXPECT_EQ(*cleared, 1);
  // The graph's kernel resolved the store once; the store was cleared in
  // place, so the registered graph and a new session still share it.
  ASSERT_TRUE(Run("session-a", *a).ok());  // v: 1 + 5
  auto b = Register("session-b", "alice/c");
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(Run("session-b", *b).ok());  // v: 6 + 5
  std::shared_ptr<ResourceMgr> store = worker_->containers().Find("alice/c", kTask0Cpu);
  ASSERT_NE(store, nullptr);
  auto v = store->LookupVariable("v");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->data<float>()[0], 11.0f);
}

TEST_F(ContainersTest, AShapeMismatchIsFailedPreconditionNamingTheVariable) {
  auto a = Register("session-a", "alice/c", true, 2);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(Run("session-a", *a).ok());
  auto b = Register("session-b", "alice/c", true, 3);
  ASSERT_TRUE(b.ok()) << b.status();
  absl::Status s = Run("session-b", *b);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "variable 'v' exists as float32[2]")) << s;
}

TEST_F(ContainersTest, ResetContainersRefusesUnboundedOrAmbiguousRequests) {
  for (const auto& [names, all] : std::vector<std::pair<std::vector<std::string>, bool>>{
           {{}, false}, {{"alice/c"}, true}, {{""}, false}, {{std::string(kMaxContainerNameBytes + 1, 'x')}, false},
           {std::vector<std::string>(kMaxResetContainers + 1, "a/b"), false}}) {
    auto r = Reset(names, all);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), "/job:worker/task:0")) << r.status();
  }
}

class ContainerQuotaTest : public ContainersTest {
 protected:
  ContainerQuotaTest() : ContainersTest(/*max_containers=*/1) {}
};

TEST_F(ContainerQuotaTest, ANewContainerPastTheQuotaIsRefusedNamingTheFlag) {
  auto a = Register("session-a", "alice/c");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(Run("session-a", *a).ok());
  auto b = Register("session-b", "alice/d");
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted) << b.status();
  EXPECT_TRUE(absl::StrContains(b.status().message(), "--max_containers=1")) << b.status();
  EXPECT_TRUE(absl::StrContains(b.status().message(), "node 'v'")) << b.status();
  // The refusal registered nothing; the same container is no new store.
  EXPECT_EQ(worker_->NumGraphs(), 1);
  auto same = Register("session-b", "alice/c");
  EXPECT_TRUE(same.ok()) << same.status();
  // Once no graph uses it and it is reset, its slot is free again.
  ASSERT_TRUE(Deregister("session-a", *a).ok());
  ASSERT_TRUE(Deregister("session-b", *same).ok());
  ASSERT_TRUE(Reset({"alice/c"}).ok());
  EXPECT_TRUE(worker_->containers().Names().empty());
  b = Register("session-b", "alice/d");
  EXPECT_TRUE(b.ok()) << b.status();
}

}  // namespace
}  // namespace worker
}  // namespace weft
