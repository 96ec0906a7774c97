#include "worker/collective/collective_executor.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "worker/collective/collective_test_util.h"
#include "worker/collective/in_process_transport.h"

namespace weft {
namespace collective {
namespace {

using testing::ExpectAllReduceMatchesReference;
using testing::ExpectNear;
using testing::MakeGroup;
using testing::RandomFloats;
using testing::ReferenceSum;
using testing::RunOnAllRanks;
using weft::testing::kWaitTimeout;

// n in-process ranks, each with a compute pool and an executor.
class Ranks {
 public:
  explicit Ranks(int n) : network_(n) {
    for (int r = 0; r < n; ++r) {
      pools_.push_back(std::make_unique<ThreadPool>(absl::StrCat("reduce", r), 1));
      executors_.push_back(std::make_unique<CollectiveExecutor>(
          network_.transport(r), network_.mailbox(r), CollectiveExecutor::Options{pools_.back().get()}));
    }
  }
  int size() const { return static_cast<int>(executors_.size()); }
  CollectiveExecutor* executor(int r) { return executors_[r].get(); }
  InProcessCollectiveNetwork* network() { return &network_; }

  CollectiveParams Params(int r, int64_t instance, int64_t step = 1) {
    CollectiveParams p;
    p.group = MakeGroup(size(), r);
    p.instance_key = instance;
    p.step_id = step;
    return p;
  }

 private:
  InProcessCollectiveNetwork network_;
  std::vector<std::unique_ptr<ThreadPool>> pools_;
  std::vector<std::unique_ptr<CollectiveExecutor>> executors_;
};

class RingAllReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(RingAllReduceTest, MatchesReferenceSumForAwkwardSizes) {
  const int n = GetParam();
  Ranks ranks(n);
  int64_t instance = 0;
  for (int64_t size : {int64_t{0}, int64_t{1}, int64_t{n - 1}, int64_t{n + 1}, int64_t{1009}, int64_t{1 << 20}}) {
    for (size_t chunk_bytes : {size_t{4096}, kDefaultChunkBytes}) {
      ++instance;
      ExpectAllReduceMatchesReference(
          n, size, static_cast<uint32_t>(instance), absl::StrCat("n=", n, " size=", size, " chunk_bytes=", chunk_bytes),
          [&](int r, Tensor* t, StatusCallback done) {
            CollectiveParams p = ranks.Params(r, instance);
            p.chunk_bytes = chunk_bytes;
            ranks.executor(r)->AllReduceAsync(p, t, std::move(done));
          });
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  for (int r = 0; r < n; ++r) EXPECT_EQ(ranks.network()->mailbox(r)->NumEntries(), 0u) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Sizes, RingAllReduceTest, ::testing::Values(1, 2, 3, 4));

TEST(RingAllReduceTest, SumsIntegersExactlyAndKeepsConcurrentCollectivesApart) {
  const int n = 3;
  Ranks ranks(n);
  std::vector<Tensor> a, b;
  for (int r = 0; r < n; ++r) {
    a.push_back(Tensor(DType::kInt64, TensorShape{10}));
    b.push_back(Tensor(DType::kInt32, TensorShape{2, 5}));
    for (int i = 0; i < 10; ++i) {
      a[r].flat<int64_t>()[i] = (int64_t{1} << 40) * r + i;
      b[r].flat<int32_t>()[i] = -r * i;
    }
  }
  // Two collectives in flight at once on every rank, with 1-element chunks.
  auto statuses = RunOnAllRanks(2 * n, [&](int i, StatusCallback done) {
    const int r = i % n;
    CollectiveParams p = ranks.Params(r, /*instance=*/i < n ? 1 : 2);
    p.chunk_bytes = 1;
    ranks.executor(r)->AllReduceAsync(p, i < n ? &a[r] : &b[r], std::move(done));
  });
  for (const auto& s : statuses) ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(a[r].flat<int64_t>()[i], (int64_t{1} << 40) * 3 + 3 * i);
      EXPECT_EQ(b[r].flat<int32_t>()[i], -3 * i);
    }
  }
}

TEST(RingAllReduceTest, RejectsWhatItCannotSum) {
  Ranks ranks(2);
  Tensor t(DType::kBool, TensorShape{4});
  EXPECT_EQ(ranks.executor(0)->AllReduce(ranks.Params(0, 1), &t).code(), absl::StatusCode::kInvalidArgument);
  Tensor empty;
  EXPECT_EQ(ranks.executor(0)->AllReduce(ranks.Params(0, 1), &empty).code(), absl::StatusCode::kInvalidArgument);
  CollectiveParams bad = ranks.Params(0, 1);
  bad.group.rank = 5;
  Tensor f = RandomFloats(4, 1, 0);
  EXPECT_EQ(ranks.executor(0)->AllReduce(bad, &f).code(), absl::StatusCode::kInvalidArgument);
}

TEST(RingAllReduceTest, UnreachablePeerFailsNamingIt) {
  Ranks ranks(3);
  ranks.network()->SetDown(1, true);
  Tensor t = RandomFloats(100, 1, 0);
  absl::Status s = ranks.executor(0)->AllReduce(ranks.Params(0, 1), &t);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("/job:worker/task:1"), absl::string_view::npos) << s;
  ranks.executor(0)->CleanupStep(1);
  EXPECT_EQ(ranks.network()->mailbox(0)->NumEntries(), 0u);
}

TEST(RingAllReduceTest, SilentPeerFailsWithDeadlineNamingIt) {
  Ranks ranks(3);
  // Rank 2 never joins, so rank 0 never hears from its previous rank.
  Tensor t0 = RandomFloats(1000, 1, 0), t1 = RandomFloats(1000, 1, 1);
  auto statuses = RunOnAllRanks(2, [&](int r, StatusCallback done) {
    CollectiveParams p = ranks.Params(r, 1);
    p.timeout = absl::Milliseconds(200);
    ranks.executor(r)->AllReduceAsync(p, r == 0 ? &t0 : &t1, std::move(done));
  });
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kDeadlineExceeded) << statuses[0];
  EXPECT_NE(statuses[0].message().find("task /job:worker/task:2 (rank 2)"), absl::string_view::npos) << statuses[0];
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kDeadlineExceeded) << statuses[1];
  for (int r = 0; r < 3; ++r) ranks.executor(r)->CleanupStep(1);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(ranks.network()->mailbox(r)->NumEntries(), 0u) << "rank " << r;
}

// The deadline thread is woken only for a deadline earlier than the one it
// sleeps until; a short deadline registered while it sleeps on a long one,
// and one registered after a finished collective's, must still fire on time.
TEST(RingAllReduceTest, ShortDeadlineFiresWhileALongOneIsPending) {
  Ranks ranks(2);
  Tensor slow = RandomFloats(10, 1, 0), fast = RandomFloats(10, 2, 0);
  absl::Notification slow_done;
  CollectiveParams p = ranks.Params(0, 1);
  p.timeout = absl::Hours(1);
  ranks.executor(0)->AllReduceAsync(p, &slow, [&](const absl::Status&) { slow_done.Notify(); });

  // A collective that finishes, so that its (earlier) deadline goes stale.
  Tensor a0 = RandomFloats(10, 3, 0), a1 = RandomFloats(10, 3, 1);
  auto finished = RunOnAllRanks(2, [&](int r, StatusCallback done) {
    CollectiveParams q = ranks.Params(r, 2);
    q.timeout = absl::Seconds(30);
    ranks.executor(r)->AllReduceAsync(q, r == 0 ? &a0 : &a1, std::move(done));
  });
  ASSERT_TRUE(finished[0].ok() && finished[1].ok()) << finished[0] << finished[1];

  for (int instance : {3, 4}) {
    CollectiveParams q = ranks.Params(0, instance);
    q.timeout = absl::Milliseconds(100);
    const absl::Time start = absl::Now();
    absl::Status s = ranks.executor(0)->AllReduce(q, &fast);
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "instance " << instance;
  }
  EXPECT_FALSE(slow_done.HasBeenNotified());
  ranks.executor(0)->Abort(absl::CancelledError("test over"));
  ASSERT_TRUE(slow_done.WaitForNotificationWithTimeout(kWaitTimeout)) << "Abort did not end the slow collective";
}

TEST(RingAllReduceTest, AbortWakesAWaitingAllReduce) {
  Ranks ranks(2);
  Tensor t = RandomFloats(1000, 1, 0);
  absl::Notification done;
  absl::Status status;
  CollectiveParams p = ranks.Params(0, 1);
  p.timeout = absl::Hours(1);
  ranks.executor(0)->AllReduceAsync(p, &t, [&](const absl::Status& s) {
    status = s;
    done.Notify();
  });
  EXPECT_FALSE(done.HasBeenNotified());
  ranks.executor(0)->Abort(absl::AbortedError("task /job:worker/task:1 failed"));
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kWaitTimeout)) << "Abort did not wake the waiting all-reduce";
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_NE(status.message().find("task:1 failed"), absl::string_view::npos) << status;
  // Until Reset, later collectives fail at once.
  EXPECT_EQ(ranks.executor(0)->AllReduce(ranks.Params(0, 2), &t).code(), absl::StatusCode::kAborted);
}

TEST(RingAllReduceTest, AbortStepWakesOnlyThatStep) {
  Ranks ranks(2);
  Tensor a = RandomFloats(10, 1, 0), b = RandomFloats(10, 2, 0);
  absl::Notification a_done, b_done;
  absl::Status a_status, b_status;
  ranks.executor(0)->AllReduceAsync(ranks.Params(0, 1, /*step=*/10), &a, [&](const absl::Status& s) {
    a_status = s;
    a_done.Notify();
  });
  ranks.executor(0)->AllReduceAsync(ranks.Params(0, 1, /*step=*/11), &b, [&](const absl::Status& s) {
    b_status = s;
    b_done.Notify();
  });
  ranks.executor(0)->AbortStep(10, absl::AbortedError("step 10 aborted"));
  ASSERT_TRUE(a_done.WaitForNotificationWithTimeout(kWaitTimeout)) << "AbortStep did not wake step 10's all-reduce";
  EXPECT_EQ(a_status.code(), absl::StatusCode::kAborted);
  EXPECT_FALSE(b_done.HasBeenNotified());
  // Rank 1 joins step 11, which then completes.
  Tensor b1 = RandomFloats(10, 2, 1);
  EXPECT_TRUE(ranks.executor(1)->AllReduce(ranks.Params(1, 1, 11), &b1).ok());
  ASSERT_TRUE(b_done.WaitForNotificationWithTimeout(kWaitTimeout)) << "step 11's all-reduce did not complete";
  EXPECT_TRUE(b_status.ok()) << b_status;
}

// What a diagnosis reads: a collective waiting for a silent peer names that
// peer and the chunks it still misses; a finished one is gone.
TEST(RingAllReduceTest, PendingNamesThePeerAWaitingAllReduceWaitsFor) {
  Ranks ranks(2);
  EXPECT_TRUE(ranks.executor(0)->Pending().empty());
  Tensor t = RandomFloats(1000, 1, 0);
  absl::Notification done;
  CollectiveParams p = ranks.Params(0, 1, /*step=*/42);
  p.timeout = absl::Hours(1);
  ranks.executor(0)->AllReduceAsync(p, &t, [&](const absl::Status&) { done.Notify(); });
  std::vector<CollectiveWait> pending = ranks.executor(0)->Pending();
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].step_id, 42);
  EXPECT_EQ(pending[0].recv_from, "/job:worker/task:1");
  EXPECT_EQ(pending[0].send_to, "/job:worker/task:1");
  EXPECT_GT(pending[0].chunks_missing, 0);
  EXPECT_EQ(pending[0].chunks_missing, pending[0].chunks_total);
  EXPECT_GE(pending[0].elapsed_seconds, 0);
  EXPECT_NE(pending[0].description.find("step 42"), std::string::npos) << pending[0].description;
  ranks.executor(0)->AbortStep(42, absl::AbortedError("test over"));
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kWaitTimeout)) << "AbortStep did not end the all-reduce";
  // Unregistered just after its `done` ran.
  EXPECT_TRUE(weft::testing::WaitUntil(kWaitTimeout, "the ended all-reduce to leave Pending",
                                       [&] { return ranks.executor(0)->Pending().empty(); }));
}

}  // namespace
}  // namespace collective
}  // namespace weft
