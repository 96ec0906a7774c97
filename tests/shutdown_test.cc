// A real `weft worker` stops on SIGTERM within a bounded time whatever its
// callers left running: here, as the master (with the master's
// certificate), a RunGraph blocked on a _Recv that nothing sends, aborts of
// step ids that never ran, and a quota exceeded on the way. The bug this
// guards against: the worker outlived SIGTERM for 20 s and more, draining
// for a master that was not there and joining steps nobody woke.
#include <signal.h>
#include <sys/wait.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/subprocess.h"
#include "common/grpc_util.h"
#include "graph/attr.h"
#include "gtest/gtest.h"
#include "proto/worker_service.grpc.pb.h"
#include "runtime/data/test_files.h"
#include "tests/test_cluster.h"
#include "tests/test_tls.h"

namespace weft {
namespace {

using data::testing::TempPath;

constexpr char kCpu[] = "/job:worker/task:0/device:CPU:0";
// The failure condition: a worker that has not exited by then hangs.
constexpr absl::Duration kExitDeadline = absl::Seconds(10);
constexpr absl::Duration kRpcDeadline = absl::Seconds(30);


// One _Recv of a value no task ever sends.
GraphDef BlockedRecvGraph() {
  GraphDef g;
  NodeDef* recv = g.add_node();
  recv->set_name("wait");
  recv->set_op("_Recv");
  recv->set_device(kCpu);
  for (auto& [name, value] :
       {Attr("tensor_type", DType::kFloat32), Attr("shape", TensorShape({1})),
        Attr("tensor_name", std::string("never_sent")), Attr("send_device", std::string(kCpu)),
        Attr("send_device_incarnation", int64_t{0}), Attr("recv_device", std::string(kCpu)),
        Attr("client_terminated", false)}) {
    (*recv->mutable_attr())[name] = value;
  }
  return g;
}

TEST(ShutdownTest, SigtermStopsAWorkerWithABlockedStepWithinTheDeadline) {
  auto tls = testing::TestTls::Create(TempPath("tls"));
  ASSERT_TRUE(tls.ok()) << tls.status();
  std::vector<std::string> args = {"worker", "--task=worker:0", "--max_graphs_per_session=1",
                                   "--data_root=" + ::testing::TempDir(), "--checkpoint_root=" + ::testing::TempDir()};
  for (const std::string& flag : tls->DaemonFlags(testing::DaemonIdentity("worker-0"))) args.push_back(flag);
  testing::TestDaemon worker("worker-0", args, TempPath("worker-0.log"));
  absl::Status started = worker.Start();
  ASSERT_TRUE(started.ok()) << started;

  // The master's certificate: only the master may register graphs and run steps.
  auto stub = WorkerService::NewStub(NewChannel(worker.address(), tls->DaemonCredentials("master")));

  RegisterGraphRequest reg;
  reg.set_session_handle("session-1");
  *reg.mutable_graph_def() = BlockedRecvGraph();
  reg.add_target("wait");
  RegisterGraphResponse reg_resp;
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kRpcDeadline);
    grpc::Status s = stub->RegisterGraph(&ctx, reg, &reg_resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  {
    // Over the quota: refused, naming it; the first graph stays.
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kRpcDeadline);
    RegisterGraphResponse second;
    grpc::Status s = stub->RegisterGraph(&ctx, reg, &second);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_NE(s.error_message().find("--max_graphs_per_session"), std::string::npos) << s.error_message();
  }
  // Aborts of steps that never ran here leave tombstones behind.
  for (int64_t step = 1000; step < 1100; ++step) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kRpcDeadline);
    AbortStepRequest req;
    req.set_step_id(step);
    AbortStepResponse resp;
    grpc::Status s = stub->AbortStep(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  // The step that never ends on its own.
  RunGraphRequest run;
  run.set_session_handle("session-1");
  run.set_graph_handle(reg_resp.graph_handle());
  run.set_step_id(7);
  RunGraphResponse run_resp;
  grpc::ClientContext run_ctx;
  SetDeadline(&run_ctx, absl::Seconds(120));
  absl::Notification run_done;
  grpc::Status run_status;
  stub->async()->RunGraph(&run_ctx, &run, &run_resp, [&](grpc::Status s) {
    run_status = std::move(s);
    run_done.Notify();
  });
  // Still blocked after a full round trip behind it: it waits on its _Recv.
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kRpcDeadline);
    GetStatusRequest req;
    GetStatusResponse resp;
    grpc::Status s = stub->GetStatus(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.num_graphs(), 1);
  }
  EXPECT_FALSE(run_done.HasBeenNotified()) << "the blocked step returned on its own: " << run_status.error_message();

  Subprocess* p = worker.process();
  p->Signal(SIGTERM);
  ASSERT_TRUE(p->WaitFor(kExitDeadline)) << "the worker did not exit within " << kExitDeadline
                                         << " of SIGTERM; log:\n"
                                         << testing::LogTail(worker.log(), 30);
  EXPECT_TRUE(WIFEXITED(p->exit_status()) && WEXITSTATUS(p->exit_status()) == 0)
      << DescribeExitStatus(p->exit_status());
  // The blocked RunGraph was answered, not left to its deadline.
  ASSERT_TRUE(run_done.WaitForNotificationWithTimeout(kRpcDeadline));
  EXPECT_FALSE(run_status.ok());
  EXPECT_TRUE(run_status.error_code() == grpc::StatusCode::UNAVAILABLE ||
              run_status.error_code() == grpc::StatusCode::CANCELLED)
      << run_status.error_code() << ": " << run_status.error_message();
}

}  // namespace
}  // namespace weft
