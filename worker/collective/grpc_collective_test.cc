// The collectives over real gRPC: one server per rank on 127.0.0.1 port 0,
// all in this process.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/thread_pool.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "worker/collective/collective_executor.h"
#include "worker/collective/collective_test_util.h"
#include "worker/collective/fusion.h"
#include "worker/collective/grpc_collective_service.h"
#include "worker/collective/grpc_collective_transport.h"

namespace weft {
namespace collective {
namespace {

using testing::ExpectAllReducesThroughExecutors;
using testing::ExpectNear;
using testing::MakeGroup;
using testing::RandomFloats;
using testing::ReferenceSum;
using testing::RunOnAllRanks;
using weft::testing::kWaitTimeout;

// One rank: its server with the collective service, its transport, its
// executor. Destruction order: executor, transport, server, mailbox.
struct GrpcRank {
  CollectiveMailbox mailbox;
  GrpcCollectiveService service{&mailbox};
  std::unique_ptr<grpc::Server> server;
  std::string address;
  ThreadPool pool{"reduce", 1};
  std::unique_ptr<GrpcCollectiveTransport> transport;
  std::unique_ptr<CollectiveExecutor> executor;

  GrpcRank() {
    grpc::ServerBuilder builder;
    ConfigureServer(&builder);
    ConfigureCollectiveServer(&builder);
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    address = absl::StrCat("127.0.0.1:", port);
    GrpcCollectiveTransport::Options options;
    options.close_timeout = absl::Seconds(2);
    transport = std::make_unique<GrpcCollectiveTransport>(options);
    executor = std::make_unique<CollectiveExecutor>(transport.get(), &mailbox, CollectiveExecutor::Options{&pool});
  }
  ~GrpcRank() { Stop(); }
  // Stops sending (closing the streams to peers), then serving.
  void StopSending() {
    executor.reset();
    transport.reset();
  }
  void Stop() {
    StopSending();
    if (server != nullptr) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server.reset();
  }
};

// Ranks that close every stream before any server shuts down, so no server
// waits for a stream whose sender is still alive.
class GrpcRanks {
 public:
  explicit GrpcRanks(int n, std::vector<std::string>* addresses) {
    for (int r = 0; r < n; ++r) {
      ranks_.push_back(std::make_unique<GrpcRank>());
      addresses->push_back(ranks_.back()->address);
    }
  }
  ~GrpcRanks() {
    for (auto& r : ranks_) r->StopSending();
  }
  std::unique_ptr<GrpcRank>& operator[](int r) { return ranks_[r]; }

 private:
  std::vector<std::unique_ptr<GrpcRank>> ranks_;
};


class GrpcAllReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(GrpcAllReduceTest, MatchesReferenceSum) {
  const int n = GetParam();
  std::vector<std::string> addresses;
  GrpcRanks ranks(n, &addresses);
  // Segments of 1M floats / n span many 64 KiB chunks: pipelined.
  ExpectAllReducesThroughExecutors(addresses, 64 << 10, {0, 1, n - 1, n + 1, 1009, 1 << 20},
                                   [&](int r) { return ranks[r]->executor.get(); });
  if (::testing::Test::HasFatalFailure()) return;
  for (int r = 0; r < n; ++r) EXPECT_EQ(ranks[r]->mailbox.NumEntries(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Ranks, GrpcAllReduceTest, ::testing::Values(2, 4));

TEST(GrpcAllReduceTest, FusedBucketsOverGrpc) {
  const int n = 2;
  std::vector<std::string> addresses;
  GrpcRanks ranks(n, &addresses);
  std::vector<std::vector<Tensor>> grads(n);
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < 20; ++k) grads[r].push_back(RandomFloats(100 * k + 1, k, r));
  }
  std::vector<std::vector<Tensor>> inputs = grads;
  for (auto& v : inputs) for (Tensor& t : v) t = t.DeepCopy();
  auto statuses = RunOnAllRanks(n, [&](int r, StatusCallback done) {
    CollectiveParams p;
    p.group = MakeGroup(n, r, addresses);
    p.instance_key = 1000;
    std::vector<Tensor*> ptrs;
    for (Tensor& t : grads[r]) ptrs.push_back(&t);
    FusedAllReduceAsync(ranks[r]->executor.get(), p, ptrs, 16 << 10, std::move(done));
  });
  for (const auto& s : statuses) ASSERT_TRUE(s.ok()) << s;
  for (int k = 0; k < 20; ++k) {
    const std::vector<double> ref = ReferenceSum({inputs[0][k], inputs[1][k]});
    for (int r = 0; r < n; ++r) ExpectNear(grads[r][k], ref, absl::StrCat("tensor ", k, " rank ", r));
  }
}

TEST(GrpcAllReduceFailureTest, PeerShutDownFailsWithinDeadlineNamingIt) {
  const int n = 2;
  std::vector<std::string> addresses;
  GrpcRanks ranks(n, &addresses);
  auto params = [&](int r, int64_t instance) {
    CollectiveParams p;
    p.group = MakeGroup(n, r, addresses);
    p.instance_key = instance;
    p.timeout = absl::Seconds(3);
    return p;
  };
  std::vector<Tensor> values = {RandomFloats(5000, 1, 0), RandomFloats(5000, 1, 1)};
  auto statuses = RunOnAllRanks(n, [&](int r, StatusCallback done) {
    ranks[r]->executor->AllReduceAsync(params(r, 1), &values[r], std::move(done));
  });
  ASSERT_TRUE(statuses[0].ok() && statuses[1].ok()) << statuses[0] << " " << statuses[1];

  ranks[1]->Stop();  // its server is gone; the stream to it breaks
  const absl::Time start = absl::Now();
  absl::Status s = ranks[0]->executor->AllReduce(params(0, 2), &values[0]);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_TRUE(s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("/job:worker/task:1"), absl::string_view::npos) << s;
  ranks[0]->executor->CleanupStep(0);
  EXPECT_EQ(ranks[0]->mailbox.NumEntries(), 0u);
}

TEST(GrpcAllReduceFailureTest, PeerNeverStartedFailsWithDeadlineNamingIt) {
  GrpcRank rank;
  // An address where nothing listens: a port from a server that is gone.
  std::string dead_address;
  {
    GrpcRank gone;
    dead_address = gone.address;
  }
  CollectiveParams p;
  p.group = MakeGroup(2, 0, {rank.address, dead_address});
  p.instance_key = 1;
  p.timeout = absl::Milliseconds(500);
  Tensor t = RandomFloats(1000, 1, 0);
  absl::Status s = rank.executor->AllReduce(p, &t);
  EXPECT_TRUE(s.code() == absl::StatusCode::kDeadlineExceeded || s.code() == absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("task /job:worker/task:1 (rank 1)"), absl::string_view::npos) << s;
}

TEST(GrpcAllReduceFailureTest, AbortWakesAWaitingAllReduce) {
  std::vector<std::string> addresses;
  GrpcRanks ranks(2, &addresses);
  CollectiveParams p;
  p.group = MakeGroup(2, 0, addresses);
  p.instance_key = 1;
  p.timeout = absl::Hours(1);
  Tensor t = RandomFloats(1000, 1, 0);
  absl::Notification done;
  absl::Status status;
  ranks[0]->executor->AllReduceAsync(p, &t, [&](const absl::Status& s) {
    status = s;
    done.Notify();
  });
  ranks[0]->executor->Abort(absl::AbortedError("job cancelled"));
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kWaitTimeout)) << "Abort did not wake the waiting all-reduce";
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
}

}  // namespace
}  // namespace collective
}  // namespace weft
