#include "runtime/local_gather.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

using Gather = LocalGather<int>;

// Join, and Run the group when this rank completes it.
void JoinAndRun(Gather& g, const std::string& key, int rank, int size, int p, Gather::DoneFn done,
                const Gather::LaunchFn& launch) {
  std::optional<Gather::Group> group = g.Join(key, rank, size, p, std::move(done));
  if (group.has_value()) Gather::Run(*std::move(group), launch);
}

// Records each done's status.
struct Outcomes {
  absl::Mutex mu;
  std::vector<absl::Status> got;
  Gather::DoneFn Done() {
    return [this](const absl::Status& s) {
      absl::MutexLock lock(&mu);
      got.push_back(s);
    };
  }
  size_t size() {
    absl::MutexLock lock(&mu);
    return got.size();
  }
};

TEST(LocalGatherTest, TheLastRankLaunchesOnceWithEveryoneInRankOrder) {
  Gather g;
  Outcomes out;
  int launches = 0;
  std::vector<int> seen;
  auto launch = [&](std::vector<int>& ps) {
    ++launches;
    seen = ps;
    return absl::OkStatus();
  };
  JoinAndRun(g, "k", 2, 3, 20, out.Done(), launch);
  JoinAndRun(g, "k", 0, 3, 0, out.Done(), launch);
  EXPECT_EQ(launches, 0);
  EXPECT_EQ(out.size(), 0u);
  EXPECT_EQ(g.NumPending(), 1);
  JoinAndRun(g, "k", 1, 3, 10, out.Done(), launch);
  EXPECT_EQ(launches, 1);
  EXPECT_EQ(seen, (std::vector<int>{0, 10, 20}));
  ASSERT_EQ(out.size(), 3u);
  for (const absl::Status& s : out.got) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(g.NumPending(), 0);
}

TEST(LocalGatherTest, ALaunchErrorReachesEveryRank) {
  Gather g;
  Outcomes out;
  auto launch = [](std::vector<int>&) { return absl::InternalError("ncclGroupEnd: unhandled cuda error"); };
  JoinAndRun(g, "k", 0, 2, 0, out.Done(), launch);
  JoinAndRun(g, "k", 1, 2, 1, out.Done(), launch);
  ASSERT_EQ(out.size(), 2u);
  for (const absl::Status& s : out.got) EXPECT_EQ(s.message(), "ncclGroupEnd: unhandled cuda error");
}

TEST(LocalGatherTest, AbortFailsTheWaitingRanksAndALateRankStartsAfresh) {
  Gather g;
  Outcomes out;
  int launches = 0;
  auto launch = [&](std::vector<int>&) {
    ++launches;
    return absl::OkStatus();
  };
  JoinAndRun(g, "step1", 0, 2, 0, out.Done(), launch);
  g.Abort("step1", absl::AbortedError("replica 1 failed"));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out.got[0].code(), absl::StatusCode::kAborted);
  EXPECT_EQ(g.NumPending(), 0);
  // The late rank waits in a new collective until its own step aborts it.
  JoinAndRun(g, "step1", 1, 2, 1, out.Done(), launch);
  EXPECT_EQ(out.size(), 1u);
  g.Abort("step1", absl::AbortedError("replica 1 failed"));
  EXPECT_EQ(out.size(), 2u);
  EXPECT_EQ(launches, 0);
  // Aborting what finished or never began changes nothing.
  g.Abort("never", absl::AbortedError("x"));
  EXPECT_EQ(out.size(), 2u);
}

TEST(LocalGatherTest, DisagreeingRanksFailTogether) {
  Gather g;
  Outcomes out;
  auto launch = [](std::vector<int>&) { return absl::OkStatus(); };
  JoinAndRun(g, "k", 0, 2, 0, out.Done(), launch);
  JoinAndRun(g, "k", 1, 3, 1, out.Done(), launch);
  ASSERT_EQ(out.size(), 2u);
  for (const absl::Status& s : out.got) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("rank 1 says 3 ranks, an earlier rank said 2"), std::string::npos) << s;
  }
  JoinAndRun(g, "j", 0, 2, 0, out.Done(), launch);
  JoinAndRun(g, "j", 0, 2, 0, out.Done(), launch);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_NE(out.got[3].message().find("joined twice"), std::string::npos) << out.got[3];
  JoinAndRun(g, "bad", 2, 2, 0, out.Done(), launch);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out.got[4].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.NumPending(), 0);
}

// Ranks on their own threads, many collectives, in shuffled orders: every
// collective launches exactly once with all of its ranks.
TEST(LocalGatherTest, ConcurrentRanksLaunchEachCollectiveOnce) {
  constexpr int kRanks = 4, kCollectives = 500;
  Gather g;
  std::atomic<int> launches{0}, bad{0}, dones{0};
  auto launch = [&](std::vector<int>& ps) {
    for (int r = 0; r < kRanks; ++r) {
      if (ps[r] != r + 1) bad.fetch_add(1);
    }
    launches.fetch_add(1);
    return absl::OkStatus();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      for (int i = 0; i < kCollectives; ++i) {
        // Each thread walks the keys in its own order.
        const int k = (r % 2 == 0) ? i : kCollectives - 1 - i;
        JoinAndRun(g, std::to_string(k), r, kRanks, r + 1,
               [&](const absl::Status& s) {
                 if (!s.ok()) bad.fetch_add(1);
                 dones.fetch_add(1);
               },
               launch);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(launches.load(), kCollectives);
  EXPECT_EQ(dones.load(), kCollectives * kRanks);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(g.NumPending(), 0);
}

}  // namespace
}  // namespace weft
