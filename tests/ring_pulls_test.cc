// RecvTensor through shared memory both ways (worker/ring_pulls.h), between
// two WorkerServers of this process on loopback over mTLS, as two tasks of
// one host run it: once each task has a ring to the other, a pull's request
// and reply skip gRPC; the reply still carries what the serving task
// decided, errors included, and a task may read only what is sent to it.
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_security.h"
#include "common/test_util.h"
#include "graph/partition.h"
#include "gtest/gtest.h"
#include "runtime/data/test_files.h"
#include "runtime/testing/test_util.h"
#include "tests/test_tls.h"
#include "worker/worker_server.h"

namespace weft {
namespace {

constexpr char kTask0[] = "/job:worker/task:0";
constexpr char kTask1[] = "/job:worker/task:1";
constexpr char kTask0Cpu[] = "/job:worker/task:0/device:CPU:0";
constexpr char kTask1Cpu[] = "/job:worker/task:1/device:CPU:0";

struct Pulled {
  absl::Status status;
  Tensor value;
};

class RingPullsTest : public ::testing::Test {
 protected:
  absl::Duration recv_timeout_ = absl::Minutes(1);

  void SetUp() override {
    auto tls = testing::TestTls::Create(data::testing::TempPath("ring-pulls-tls"));
    ASSERT_TRUE(tls.ok()) << tls.status();
    tls_ = std::make_unique<testing::TestTls>(*std::move(tls));
    ClusterDef cluster;
    JobDef* job = cluster.add_job();
    job->set_name("worker");
    for (int t : {0, 1}) {
      const std::string identity = t == 0 ? kTask0 : kTask1;
      auto files = tls_->Issue(identity, Role::kCluster);
      ASSERT_TRUE(files.ok()) << files.status();
      TlsFiles f;
      f.ca = tls_->ca();
      f.cert = files->first;
      f.key = files->second;
      auto security = TransportSecurity::ForDaemon(f, identity);
      ASSERT_TRUE(security.ok()) << security.status();
      worker::WorkerServerOptions o;
      o.task_index = t;
      o.listen_address = "127.0.0.1:0";
      o.security = *security;
      o.shutdown_grace = absl::Seconds(2);
      o.recv_tensor_timeout = recv_timeout_;
      auto s = worker::StartWorkerServer(o);
      ASSERT_TRUE(s.ok()) << s.status();
      servers_[t] = *std::move(s);
      (*job->mutable_tasks())[t] = servers_[t]->address();
    }
    for (auto& s : servers_) s->SetCluster(cluster);
  }

  // Task 1 pulls what task 0 sends under `key` (sent first when `value` is
  // initialised) for step `step`.
  Pulled Pull(int64_t step, const std::string& key, const Tensor& value) {
    if (value.IsInitialized()) {
      EXPECT_TRUE(servers_[0]->worker()->rendezvous_mgr()->Find(step)->Send(key, value, false).ok());
    }
    auto done = std::make_shared<absl::Notification>();
    auto out = std::make_shared<Pulled>();
    servers_[1]->puller()->PullAsync(kTask0, step, key, [done, out](const absl::Status& s, const Tensor& t, bool) {
      out->status = s;
      out->value = t;
      done->Notify();
    });
    EXPECT_TRUE(done->WaitForNotificationWithTimeout(weft::testing::kWaitTimeout)) << "pull of step " << step;
    servers_[0]->worker()->rendezvous_mgr()->Cleanup(step);
    return *out;
  }

  // Pulls until one goes through the rings (the first go over gRPC; their
  // replies and requests offer the rings, a second apart at most when an
  // offer races the peer's start); returns the next free step.
  int64_t WarmRings() {
    const Tensor value = weft::testing::RandomTensor({256, 300}, 5);
    worker::GrpcTensorPuller* puller = servers_[1]->puller();
    int64_t step = 1;
    for (; step < 400 && puller->ring_pulls() == 0; ++step) {
      Pulled got = Pull(step, RendezvousKey(kTask0Cpu, 0, kTask1Cpu, "v:0", step), value);
      EXPECT_TRUE(got.status.ok()) << got.status;
      EXPECT_EQ(std::memcmp(got.value.raw_data(), value.raw_data(), value.TotalBytes()), 0) << "step " << step;
      if (puller->ring_pulls() == 0) absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_GT(puller->ring_pulls(), 0u) << "no pull went through the rings in " << step << " steps";
    return step;
  }

  std::unique_ptr<testing::TestTls> tls_;
  std::unique_ptr<worker::WorkerServer> servers_[2];
};

TEST_F(RingPullsTest, PullsSkipGrpcOnceRingsGoBothWaysAndCarryTheServersErrors) {
  worker::GrpcTensorPuller* puller = servers_[1]->puller();
  const Tensor value = weft::testing::RandomTensor({256, 300}, 5);
  int64_t step = WarmRings();
  ASSERT_GT(puller->ring_pulls(), 0u);

  // Through the rings: bit-exact, a value larger than half a ring included
  // (its reply comes in parts).
  const uint64_t before = puller->ring_pulls();
  const Tensor large = weft::testing::RandomTensor({3, 1 << 20}, 6);  // 12 MiB over 8 MiB rings
  ++step;
  Pulled got = Pull(step, RendezvousKey(kTask0Cpu, 0, kTask1Cpu, "large:0", step), large);
  ASSERT_TRUE(got.status.ok()) << got.status;
  ASSERT_EQ(got.value.shape(), large.shape());
  EXPECT_EQ(std::memcmp(got.value.raw_data(), large.raw_data(), large.TotalBytes()), 0);
  EXPECT_EQ(puller->ring_pulls(), before + 1);

  // The serving task's errors come back through the ring as themselves.
  ++step;
  got = Pull(step, RendezvousKey(kTask0Cpu, servers_[0]->worker()->incarnation() + 1, kTask1Cpu, "old:0", step),
             Tensor());
  EXPECT_EQ(got.status.code(), absl::StatusCode::kAborted) << got.status;
  EXPECT_TRUE(absl::StrContains(got.status.message(), "restarted")) << got.status;
  EXPECT_TRUE(absl::StrContains(got.status.message(), kTask0)) << got.status;
  // Task 1 may not read what task 0 sends to itself (or anyone else).
  ++step;
  got = Pull(step, RendezvousKey(kTask0Cpu, 0, kTask0Cpu, "private:0", step), value);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kPermissionDenied) << got.status;
  EXPECT_TRUE(absl::StrContains(got.status.message(), "task /job:worker/task:1 asked for 'private:0'"))
      << got.status;
  EXPECT_EQ(puller->ring_pulls(), before + 3) << "the refused pulls went over gRPC";
}

// The serving task gone: the ring from it closes, and a pull waiting on it
// fails with UNAVAILABLE naming it instead of waiting out the pull's timeout.
TEST_F(RingPullsTest, APullWaitingOnAStoppedTaskFails) {
  worker::GrpcTensorPuller* puller = servers_[1]->puller();
  WarmRings();
  ASSERT_GT(puller->ring_pulls(), 0u);
  auto done = std::make_shared<absl::Notification>();
  auto status = std::make_shared<absl::Status>();
  // Nothing is ever sent under this key: the pull waits on task 0.
  puller->PullAsync(kTask0, 1000, RendezvousKey(kTask0Cpu, 0, kTask1Cpu, "never:0", 1000),
                    [done, status](const absl::Status& s, const Tensor&, bool) {
                      *status = s;
                      done->Notify();
                    });
  servers_[0]->Shutdown();
  ASSERT_TRUE(done->WaitForNotificationWithTimeout(weft::testing::kWaitTimeout));
  EXPECT_FALSE(status->ok());
  EXPECT_TRUE(absl::StrContains(status->message(), kTask0)) << *status;
}

// A pull through the rings has the timeout of one over gRPC: a value never
// sent fails it with DEADLINE_EXCEEDED naming the task, not a hang.
class RingPullDeadlineTest : public RingPullsTest {
 protected:
  void SetUp() override {
    recv_timeout_ = absl::Seconds(3);
    RingPullsTest::SetUp();
  }
};

TEST_F(RingPullDeadlineTest, APullThroughTheRingsWithNoReplyFailsAtTheTimeout) {
  worker::GrpcTensorPuller* puller = servers_[1]->puller();
  WarmRings();
  ASSERT_GT(puller->ring_pulls(), 0u);
  const uint64_t before = puller->ring_pulls();
  Pulled got = Pull(1000, RendezvousKey(kTask0Cpu, 0, kTask1Cpu, "never:0", 1000), Tensor());
  EXPECT_EQ(puller->ring_pulls(), before + 1) << "the pull went over gRPC";
  EXPECT_EQ(got.status.code(), absl::StatusCode::kDeadlineExceeded) << got.status;
  EXPECT_TRUE(absl::StrContains(got.status.message(), kTask0)) << got.status;
  EXPECT_TRUE(absl::StrContains(got.status.message(), "3s")) << got.status;
}

}  // namespace
}  // namespace weft
