// Two WorkerServers on loopback in one process, driven through real stubs.
#include <dirent.h>

#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/tensor_proto_coding.h"
#include "common/test_util.h"
#include "graph/partition.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "runtime/executor.h"
#include "runtime/testing/test_util.h"
#include "worker/grpc_remote_worker.h"
#include "worker/worker_server.h"
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

std::string ReadLine(const std::string& path) {
  char buf[64] = {0};
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    if (std::fgets(buf, sizeof buf, f) == nullptr) buf[0] = 0;
    std::fclose(f);
  }
  return buf;
}

// Threads that weft started: gRPC names its threads ("default-executo",
// "event_engine", ...), weft's pools leave the process name.
int NumWeftThreads() {
  const std::string self = ReadLine("/proc/self/comm");
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.' && ReadLine(absl::StrCat("/proc/self/task/", e->d_name, "/comm")) == self) ++n;
  }
  closedir(d);
  return n;
}

std::string ThreadNames() {
  std::string out;
  DIR* d = opendir("/proc/self/task");
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') {
      absl::StrAppend(&out, e->d_name, ":", ReadLine(absl::StrCat("/proc/self/task/", e->d_name, "/comm")));
    }
  }
  closedir(d);
  return out;
}

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

std::unique_ptr<WorkerServer> Start(int task) {
  WorkerServerOptions o;
  o.task_index = task;
  o.listen_address = "127.0.0.1:0";
  o.shutdown_grace = absl::Seconds(2);
  auto s = StartWorkerServer(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

class GrpcWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    servers_[0] = Start(0);
    servers_[1] = Start(1);
    ASSERT_NE(servers_[0], nullptr);
    ASSERT_NE(servers_[1], nullptr);
    // The servers started on port 0 knowing no peer, as `weft worker
    // --listen=HOST:0` does; Register sends them the cluster, as the master
    // does.
    JobDef* job = cluster_.add_job();
    job->set_name("worker");
    (*job->mutable_tasks())[0] = servers_[0]->address();
    (*job->mutable_tasks())[1] = servers_[1]->address();
    for (int i = 0; i < 2; ++i) {
      auto w = NewGrpcRemoteWorker(cluster_, i == 0 ? kTask0 : kTask1, &channels_);
      ASSERT_TRUE(w.ok()) << w.status();
      remote_[i] = *std::move(w);
    }
  }

  // Registers `req` on `task` carrying the cluster (unless told not to).
  std::string Register(int task, RegisterGraphRequest req, bool with_cluster = true) {
    if (with_cluster) *req.mutable_cluster() = cluster_;
    RegisterGraphResponse resp;
    absl::Status s = WaitFor([&](StatusCallback d) { remote_[task]->RegisterGraphAsync(&req, &resp, d); });
    EXPECT_TRUE(s.ok()) << s;
    return resp.graph_handle();
  }

  // Runs a step on both tasks in parallel, as the master does.
  void RunBoth(RunGraphRequest* req0, RunGraphRequest* req1, RunGraphResponse* r0, RunGraphResponse* r1,
               absl::Status* s0, absl::Status* s1) {
    absl::Notification n0, n1;
    remote_[0]->RunGraphAsync(req0, r0, absl::Seconds(60), [&](const absl::Status& s) {
      *s0 = s;
      n0.Notify();
    });
    remote_[1]->RunGraphAsync(req1, r1, absl::Seconds(60), [&](const absl::Status& s) {
      *s1 = s;
      n1.Notify();
    });
    ASSERT_TRUE(n0.WaitForNotificationWithTimeout(kWaitTimeout)) << "task 0's RunGraph never completed";
    ASSERT_TRUE(n1.WaitForNotificationWithTimeout(kWaitTimeout)) << "task 1's RunGraph never completed";
  }

  // Registers the split graph and checks `steps` steps against RunGraphOnce.
  void RunSplitGraph(int64_t n, int64_t k, int64_t m, int steps) {
    auto split = testing::BuildSplitGraph(n, k, m, /*seed=*/3);
    ASSERT_TRUE(split.ok()) << split.status();
    RunGraphRequest req0, req1;
    req0.set_graph_handle(Register(0, MakeRegisterRequest(split->part0, {"x"}, {"z"})));
    req1.set_graph_handle(Register(1, MakeRegisterRequest(split->part1, {}, {"y"})));
    CpuDevice cpu("/device:CPU:0", 1);
    for (int step = 1; step <= steps; ++step) {
      Tensor x = weft::testing::RandomTensor({n, k}, step);
      req0.set_step_id(100 + step);
      req1.set_step_id(100 + step);
      req0.clear_send();
      AddFeed(&req0, "x", x);
      RunGraphResponse r0, r1;
      absl::Status s0, s1;
      RunBoth(&req0, &req1, &r0, &r1, &s0, &s1);
      ASSERT_TRUE(s0.ok()) << s0;
      ASSERT_TRUE(s1.ok()) << s1;
      auto want = RunGraphOnce(*split->whole, &cpu, {{"x", x}}, {"z", "y"});
      ASSERT_TRUE(want.ok()) << want.status();
      EXPECT_LE(weft::testing::MaxAbsDiff(Fetched(r0, "z"), (*want)[0]), 1e-6);
      EXPECT_LE(weft::testing::MaxAbsDiff(Fetched(r1, "y"), (*want)[1]), 1e-6);
      for (auto& w : remote_) {
        CleanupStepRequest c;
        c.set_step_id(100 + step);
        CleanupStepResponse cr;
        EXPECT_TRUE(WaitFor([&](StatusCallback d) { w->CleanupStepAsync(&c, &cr, d); }).ok());
      }
    }
    EXPECT_EQ(servers_[0]->worker()->rendezvous_mgr()->NumSteps(), 0);
    EXPECT_EQ(servers_[1]->worker()->rendezvous_mgr()->NumSteps(), 0);
  }

  ClusterDef cluster_;
  ChannelCache channels_;
  std::unique_ptr<WorkerServer> servers_[2];
  std::unique_ptr<GrpcRemoteWorker> remote_[2];
};

TEST_F(GrpcWorkerTest, GetStatusOverTheWire) {
  GetStatusRequest req;
  GetStatusResponse resp;
  ASSERT_TRUE(WaitFor([&](StatusCallback d) { remote_[1]->GetStatusAsync(&req, &resp, d); }).ok());
  EXPECT_EQ(resp.task(), kTask1);
  EXPECT_EQ(resp.incarnation(), servers_[1]->worker()->incarnation());
  ASSERT_EQ(resp.device_size(), 1);
  EXPECT_EQ(resp.device(0).name(), kTask1Cpu);
}

// A second task on a port in use must not start: with SO_REUSEPORT both
// would listen and a peer's call could reach the wrong one.
TEST_F(GrpcWorkerTest, ASecondServerOnAPortInUseDoesNotStart) {
  WorkerServerOptions o;
  o.task_index = 2;
  o.listen_address = absl::StrCat("127.0.0.1:", servers_[0]->port());
  o.shutdown_grace = absl::Seconds(2);
  auto second = StartWorkerServer(o);
  EXPECT_FALSE(second.ok()) << "a second server took port " << servers_[0]->port();
}

TEST_F(GrpcWorkerTest, PartitionedGraphMatchesTheWholeGraph) { RunSplitGraph(5, 7, 3, 3); }

// Without the cluster that RegisterGraph carries, a task started knowing no
// peer cannot pull: the step fails naming the task it could not find.
TEST_F(GrpcWorkerTest, WithoutTheClusterAPullNamesTheTaskItCannotReach) {
  auto split = testing::BuildSplitGraph(2, 2, 2, /*seed=*/3);
  ASSERT_TRUE(split.ok()) << split.status();
  RunGraphRequest req0, req1;
  req0.set_graph_handle(Register(0, MakeRegisterRequest(split->part0, {"x"}, {"z"}), /*with_cluster=*/false));
  req1.set_graph_handle(Register(1, MakeRegisterRequest(split->part1, {}, {"y"}), /*with_cluster=*/false));
  req0.set_step_id(1);
  req1.set_step_id(1);
  AddFeed(&req0, "x", weft::testing::RandomTensor({2, 2}, 1));
  RunGraphResponse r0, r1;
  absl::Status s0, s1;
  RunBoth(&req0, &req1, &r0, &r1, &s0, &s1);
  EXPECT_FALSE(s1.ok());
  EXPECT_TRUE(absl::StrContains(s1.message(), "task /job:worker/task:0 is not in the cluster")) << s1;
  EXPECT_FALSE(s0.ok());
}

// A malformed cluster is refused over the wire, naming the task and the
// address at fault, and registers nothing.
TEST_F(GrpcWorkerTest, AMalformedClusterIsRefused) {
  auto split = testing::BuildSplitGraph(2, 2, 2, /*seed=*/3);
  ASSERT_TRUE(split.ok()) << split.status();
  RegisterGraphRequest req = MakeRegisterRequest(split->part1, {}, {"y"});
  *req.mutable_cluster() = cluster_;
  (*req.mutable_cluster()->mutable_job(0)->mutable_tasks())[0] = "127.0.0.1";
  RegisterGraphResponse resp;
  absl::Status s = WaitFor([&](StatusCallback d) { remote_[1]->RegisterGraphAsync(&req, &resp, d); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), "task /job:worker/task:1: ")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "'127.0.0.1' is not host:port")) << s;
  EXPECT_EQ(servers_[1]->worker()->NumGraphs(), 0);
}

// h = Relu(x) is [4096, 4096] float32: 64 MiB crosses from task 0 to task 1.
TEST_F(GrpcWorkerTest, A64MiBTensorCrosses) { RunSplitGraph(4096, 4096, 2, 1); }

// RecvTensor alone: a 64 MiB value sent on task 0, pulled by a client the way
// task 1's rendezvous pulls it. Prints the throughput.
TEST_F(GrpcWorkerTest, RecvTensorPulls64MiBBitExact) {
  GrpcTensorPuller puller(cluster_, &channels_, absl::Seconds(60));
  Tensor value = weft::testing::RandomTensor({16, 1 << 20}, 11);
  constexpr int kRounds = 5;
  absl::Duration best = absl::InfiniteDuration();
  for (int round = 0; round < kRounds; ++round) {
    const int64_t step = 500 + round;
    const std::string key = RendezvousKey(kTask0Cpu, 0, kTask1Cpu, "big:0", step);
    ASSERT_TRUE(servers_[0]->worker()->rendezvous_mgr()->Find(step)->Send(key, value, false).ok());
    absl::Notification done;
    absl::Status status;
    Tensor got;
    const absl::Time start = absl::Now();
    puller.PullAsync(kTask0, step, key, [&](const absl::Status& s, const Tensor& t, bool) {
      status = s;
      got = t;
      done.Notify();
    });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(kWaitTimeout)) << "the pull of step " << step << " never completed";
    best = std::min(best, absl::Now() - start);
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_EQ(got.shape(), value.shape());
    EXPECT_EQ(std::memcmp(got.raw_data(), value.raw_data(), value.TotalBytes()), 0);
    servers_[0]->worker()->rendezvous_mgr()->Cleanup(step);
  }
  // The sender's buffer is released once gRPC has written it.
  EXPECT_TRUE(WaitUntil(absl::Seconds(10), "gRPC to release the sent tensor's buffer",
                        [&] { return value.RefCountIsOne(); }));
  const double mib = static_cast<double>(value.TotalBytes()) / (1 << 20);
  std::printf("RecvTensor 64 MiB over loopback: best %.1f ms, %.0f MiB/s\n", absl::ToDoubleMilliseconds(best),
              mib / absl::ToDoubleSeconds(best));
}

TEST_F(GrpcWorkerTest, UnknownHandleIsNotFoundNamingTaskAndHandle) {
  RunGraphRequest req;
  req.set_graph_handle("g_missing");
  RunGraphResponse resp;
  absl::Status s = WaitFor([&](StatusCallback d) { remote_[0]->RunGraphAsync(&req, &resp, absl::Seconds(10), d); });
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), "task /job:worker/task:0: ")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "'g_missing'")) << s;
}

TEST_F(GrpcWorkerTest, StoppedServerIsUnavailableNamingTheTask) {
  servers_[1]->Shutdown();
  RunGraphRequest req;
  req.set_graph_handle("g");
  RunGraphResponse resp;
  absl::Status s = WaitFor([&](StatusCallback d) { remote_[1]->RunGraphAsync(&req, &resp, absl::Seconds(10), d); });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), kTask1)) << s;
}

// grpc.health.v1.Health/Check through a generic stub: Debian ships no
// generated health stubs, and the messages are tiny. An empty request asks
// about the whole server; the reply {status: SERVING} is 0x08 0x01.
TEST_F(GrpcWorkerTest, HealthServiceAnswersServing) {
  grpc::GenericStub stub(channels_.Get(servers_[0]->address()));
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(10));
  grpc::Slice empty{std::string()};
  grpc::ByteBuffer request(&empty, 1), response;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = s;
                   done.Notify();
                 });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kWaitTimeout)) << "the health check never completed";
  ASSERT_TRUE(status.ok()) << status.error_message();
  grpc::Slice slice;
  ASSERT_TRUE(response.DumpToSingleSlice(&slice).ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(slice.begin()), slice.size()), std::string("\x08\x01", 2));
}

// Task 1's step waits for a value task 0 never sends; Shutdown must end the
// in-flight RunGraph, return, and leave none of the server's threads behind.
TEST_F(GrpcWorkerTest, ShutdownWithAStepInFlightReturnsAndJoinsItsThreads) {
  auto split = testing::BuildSplitGraph(2, 2, 2, 1);
  ASSERT_TRUE(split.ok());
  const int threads_before = NumWeftThreads();
  auto extra = Start(1);  // a third server, replacing task 1 for this test
  ASSERT_NE(extra, nullptr);
  GrpcRemoteWorker remote(kTask1, channels_.Get(extra->address()));
  RegisterGraphRequest reg = MakeRegisterRequest(split->part1, {}, {"y"});
  *reg.mutable_cluster() = cluster_;
  RegisterGraphResponse reg_resp;
  ASSERT_TRUE(WaitFor([&](StatusCallback d) { remote.RegisterGraphAsync(&reg, &reg_resp, d); }).ok());

  RunGraphRequest req;
  req.set_graph_handle(reg_resp.graph_handle());
  req.set_step_id(77);
  RunGraphResponse resp;
  absl::Notification finished;
  absl::Status status;
  remote.RunGraphAsync(&req, &resp, absl::Seconds(60), [&](const absl::Status& s) {
    status = s;
    finished.Notify();
  });
  // Its _Recv has pulled from task 0 once task 0 has a table for step 77.
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "task 1's _Recv to pull from task 0",
                        [&] { return servers_[0]->worker()->rendezvous_mgr()->NumSteps() > 0; }));
  EXPECT_GT(NumWeftThreads(), threads_before);  // its compute and inter-op pools

  const absl::Time start = absl::Now();
  extra->Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  extra.reset();
  // gRPC may briefly run a thread not yet named, so allow it a moment.
  EXPECT_TRUE(WaitUntil(absl::Seconds(5), absl::StrCat("the server's threads to end (", threads_before, " before)"),
                        [&] { return NumWeftThreads() <= threads_before; }))
      << ThreadNames();
}

}  // namespace
}  // namespace worker
}  // namespace weft
