#include "runtime/rendezvous.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

Tensor Scalar(float v) { return Tensor::Scalar<float>(v); }

TEST(LocalRendezvousTest, SendThenRecv) {
  LocalRendezvous r;
  ASSERT_TRUE(r.Send("k", Scalar(3), false).ok());
  EXPECT_EQ(r.NumPending(), 1);
  Tensor v;
  bool dead = true;
  ASSERT_TRUE(r.Recv("k", &v, &dead).ok());
  EXPECT_EQ(*v.data<float>(), 3.0f);
  EXPECT_FALSE(dead);
  EXPECT_EQ(r.NumPending(), 0);
}

TEST(LocalRendezvousTest, RecvThenSendSharesTheBuffer) {
  LocalRendezvous r;
  Tensor sent = Scalar(7);
  absl::Notification got;
  Tensor v;
  r.RecvAsync("k", [&](const absl::Status& s, const Tensor& t, bool dead) {
    EXPECT_TRUE(s.ok()) << s;
    v = t;
    got.Notify();
  });
  EXPECT_FALSE(got.HasBeenNotified());
  ASSERT_TRUE(r.Send("k", sent, false).ok());
  ASSERT_TRUE(got.HasBeenNotified());  // runs on the sender's thread
  EXPECT_TRUE(v.SharesBufferWith(sent));
  EXPECT_EQ(r.NumPending(), 0);
}

TEST(LocalRendezvousTest, BlockingRecvWakesOnSendFromAnotherThread) {
  LocalRendezvous r;
  absl::Status received;
  Tensor v;
  std::thread receiver([&] {
    bool dead = true;
    received = r.Recv("k", &v, &dead);
    EXPECT_FALSE(dead);
  });
  // The sender goes only once the receiver waits, so Recv has blocked
  // before the value exists and the Send is what wakes it.
  const bool waiting = r.AwaitWaitingReceivers(1, absl::Seconds(30));
  EXPECT_TRUE(waiting) << "the receiver of 'k' never started waiting";
  if (!waiting) r.StartAbort(absl::DeadlineExceededError("the test gave up on the receiver"));
  EXPECT_EQ(r.NumPending(), 1);  // the waiting receiver, no value
  EXPECT_TRUE(r.Send("k", Scalar(1), false).ok());
  receiver.join();
  ASSERT_TRUE(received.ok()) << received;
  EXPECT_EQ(*v.data<float>(), 1.0f);
  EXPECT_EQ(r.NumPending(), 0);
}

TEST(LocalRendezvousTest, AwaitWaitingReceiversCountsReceiversNotValues) {
  LocalRendezvous r;
  ASSERT_TRUE(r.Send("sent", Scalar(1), false).ok());
  // A value waiting for its receiver is not a waiting receiver.
  EXPECT_FALSE(r.AwaitWaitingReceivers(1, absl::ZeroDuration()));
  r.RecvAsync("a", [](const absl::Status&, const Tensor&, bool) {});
  EXPECT_TRUE(r.AwaitWaitingReceivers(1, absl::ZeroDuration()));
  EXPECT_FALSE(r.AwaitWaitingReceivers(2, absl::ZeroDuration()));
  // Once its value arrives the receiver is no longer waiting.
  ASSERT_TRUE(r.Send("a", Scalar(2), false).ok());
  EXPECT_FALSE(r.AwaitWaitingReceivers(1, absl::ZeroDuration()));
}

TEST(LocalRendezvousTest, DuplicateSendOrRecvIsAnError) {
  LocalRendezvous r;
  ASSERT_TRUE(r.Send("k", Scalar(1), false).ok());
  EXPECT_EQ(r.Send("k", Scalar(2), false).code(), absl::StatusCode::kAlreadyExists);

  r.RecvAsync("j", [](const absl::Status&, const Tensor&, bool) {});
  absl::Status second;
  r.RecvAsync("j", [&](const absl::Status& s, const Tensor&, bool) { second = s; });
  EXPECT_EQ(second.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(second.message().find("'j'"), absl::string_view::npos) << second;
}

TEST(LocalRendezvousTest, AbortWakesWaitingReceiversAndFailsLaterCalls) {
  LocalRendezvous r;
  constexpr int kWaiters = 4;
  std::vector<absl::Status> got(kWaiters);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&, i] {
      Tensor v;
      bool dead;
      got[i] = r.Recv(absl::StrCat("k", i), &v, &dead);
    });
  }
  // Aborting before they all wait would pass too (a late Recv fails with
  // the abort status), but would not show that waiting receivers wake.
  EXPECT_TRUE(r.AwaitWaitingReceivers(kWaiters, absl::Seconds(30)))
      << "the " << kWaiters << " receivers never all started waiting";
  r.StartAbort(absl::AbortedError("peer died"));
  for (auto& t : threads) t.join();
  for (const absl::Status& s : got) {
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
    EXPECT_EQ(s.message(), "peer died");
  }
  EXPECT_EQ(r.Send("x", Scalar(1), false).code(), absl::StatusCode::kAborted);
  Tensor v;
  bool dead;
  EXPECT_EQ(r.Recv("x", &v, &dead).code(), absl::StatusCode::kAborted);
  // The first abort wins.
  r.StartAbort(absl::InternalError("later"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAborted);
}

TEST(LocalRendezvousTest, ConcurrentSendersAndReceiversOnManyKeys) {
  LocalRendezvous r;
  constexpr int kThreads = 4;
  constexpr int kKeysPerThread = 500;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    // Senders go in ascending key order, receivers in descending order, so
    // both orders of arrival happen.
    threads.emplace_back([&, t] {
      for (int i = 0; i < kKeysPerThread; ++i) {
        const int k = t * kKeysPerThread + i;
        if (!r.Send(absl::StrCat("key", k), Scalar(static_cast<float>(k)), false).ok()) ++wrong;
      }
    });
    threads.emplace_back([&, t] {
      for (int i = kKeysPerThread - 1; i >= 0; --i) {
        const int k = t * kKeysPerThread + i;
        Tensor v;
        bool dead;
        absl::Status s = r.Recv(absl::StrCat("key", k), &v, &dead);
        if (!s.ok() || *v.data<float>() != static_cast<float>(k)) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(r.NumPending(), 0);
}

TEST(ParseRendezvousKeyTest, RoundTripsTheFiveParts) {
  auto k = ParseRendezvousKey("/job:a/task:0/device:CPU:0;00000000000000ff;/job:b/task:1/device:CPU:0;x:1;42");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->send_device, "/job:a/task:0/device:CPU:0");
  EXPECT_EQ(k->incarnation, 255u);
  EXPECT_EQ(k->recv_device, "/job:b/task:1/device:CPU:0");
  EXPECT_EQ(k->tensor_name, "x:1");
  EXPECT_EQ(k->step_id, 42);

  EXPECT_EQ(ParseRendezvousKey("a;1;b;x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseRendezvousKey("a;zz;b;x;1").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseRendezvousKey("a;1;b;x;step").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RendezvousMgrTest, OneRendezvousPerStepUntilCleanup) {
  RendezvousMgr mgr;
  auto a = mgr.Find(1);
  EXPECT_EQ(mgr.Find(1), a);
  EXPECT_NE(mgr.Find(2), a);
  EXPECT_EQ(mgr.NumSteps(), 2);

  absl::Status waiter;
  a->RecvAsync("k", [&](const absl::Status& s, const Tensor&, bool) { waiter = s; });
  mgr.Cleanup(1);
  EXPECT_EQ(waiter.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(mgr.NumSteps(), 1);
  EXPECT_NE(mgr.Find(1), a);  // a fresh one for a reused id
  mgr.Cleanup(1);
  mgr.Cleanup(2);
  mgr.Cleanup(99);  // unknown: nothing to do
  EXPECT_EQ(mgr.NumSteps(), 0);
}

TEST(RendezvousMgrTest, AbortStepWakesReceiversAndAffectsOnlyThatStep) {
  RendezvousMgr mgr;
  absl::Status waiter;
  mgr.Find(5)->RecvAsync("k", [&](const absl::Status& s, const Tensor&, bool) { waiter = s; });
  mgr.AbortStep(5, absl::AbortedError("step 5 failed on /job:ps/task:0"));
  EXPECT_EQ(waiter.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(mgr.Find(5)->Send("k2", Scalar(1), false).code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(mgr.Find(6)->Send("k2", Scalar(1), false).ok());

  // Aborting a step not seen yet makes it fail on arrival.
  mgr.AbortStep(7, absl::AbortedError("early"));
  EXPECT_EQ(mgr.Find(7)->Send("k", Scalar(1), false).code(), absl::StatusCode::kAborted);
}

TEST(RendezvousMgrTest, AbortAllCoversLiveAndFutureSteps) {
  RendezvousMgr mgr;
  absl::Status waiter;
  mgr.Find(1)->RecvAsync("k", [&](const absl::Status& s, const Tensor&, bool) { waiter = s; });
  mgr.AbortAll(absl::UnavailableError("shutting down"));
  EXPECT_EQ(waiter.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(mgr.Find(2)->Send("k", Scalar(1), false).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(mgr.NumSteps(), 0);
}

TEST(RendezvousMgrTest, UsesTheFactory) {
  std::vector<int64_t> made;
  RendezvousMgr mgr([&](int64_t step) {
    made.push_back(step);
    return std::make_shared<LocalRendezvous>();
  });
  mgr.Find(3);
  mgr.Find(3);
  mgr.Find(4);
  EXPECT_EQ(made, (std::vector<int64_t>{3, 4}));
}


TEST(RendezvousMgrTest, StepsOnlyPeersCreatedAreBoundedAndLiveStepsSurvive) {
  RendezvousMgr mgr(nullptr, RendezvousLimits{/*max_steps=*/4, /*unclaimed_ttl=*/absl::Hours(1)});
  mgr.Find(1);  // a step this task runs: never evicted for room
  mgr.AbortStep(100, absl::AbortedError("x"));
  mgr.AbortStep(101, absl::AbortedError("x"));
  mgr.FindForPeer(102);
  EXPECT_EQ(mgr.NumSteps(), 4);
  // Full: the aborted tombstones make room; the running step and the peer's
  // waiting step stay.
  mgr.AbortStep(103, absl::AbortedError("x"));
  EXPECT_EQ(mgr.NumSteps(), 3);
  EXPECT_TRUE(mgr.Find(1)->Send("k", Scalar(1), false).ok());
  // Full of steps that cannot be dropped: a new one is refused at once,
  // naming the quota, and holds no slot.
  mgr.Find(2);
  mgr.FindForPeer(3);
  absl::Status refused = mgr.FindForPeer(4)->Send("k", Scalar(1), false);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(std::string(refused.message()).find("--max_live_steps"), std::string::npos) << refused;
  EXPECT_EQ(mgr.NumSteps(), 4);
  // Once a step is cleaned up a legitimate one runs again.
  mgr.Cleanup(2);
  EXPECT_TRUE(mgr.Find(5)->Send("k", Scalar(1), false).ok());
}

TEST(RendezvousMgrTest, UnclaimedStepsExpireAndWakeTheirWaiters) {
  absl::Time now = absl::FromUnixSeconds(1000);
  RendezvousMgr mgr(nullptr, RendezvousLimits{/*max_steps=*/100, /*unclaimed_ttl=*/absl::Seconds(60)});
  mgr.SetClockForTest([&] { return now; });
  absl::Status peer_wait;
  bool woke = false;
  mgr.FindForPeer(7)->RecvAsync("k", [&](const absl::Status& s, const Tensor&, bool) {
    peer_wait = s;
    woke = true;
  });
  mgr.Find(8);  // claimed: does not expire
  now += absl::Seconds(61);
  mgr.Find(9);  // creating a step sweeps
  ASSERT_TRUE(woke);
  EXPECT_EQ(peer_wait.code(), absl::StatusCode::kDeadlineExceeded) << peer_wait;
  EXPECT_EQ(mgr.NumSteps(), 2);  // 8 and 9
  // A RunGraph of step 7 arriving now gets a fresh rendezvous.
  EXPECT_TRUE(mgr.Find(7)->Send("k", Scalar(1), false).ok());
}

TEST(RendezvousMgrTest, RunGraphClaimsAStepAPeerCreated) {
  absl::Time now = absl::FromUnixSeconds(1000);
  RendezvousMgr mgr(nullptr, RendezvousLimits{100, absl::Seconds(60)});
  mgr.SetClockForTest([&] { return now; });
  std::shared_ptr<Rendezvous> r = mgr.FindForPeer(7);
  EXPECT_EQ(mgr.Find(7), r);  // the same rendezvous, now claimed
  now += absl::Seconds(120);
  mgr.Find(8);
  EXPECT_EQ(mgr.NumSteps(), 2);
  EXPECT_TRUE(mgr.Find(7)->Send("k", Scalar(1), false).ok());
}

}  // namespace
}  // namespace weft
