#include "worker/remote_rendezvous.h"

#include <vector>

#include "graph/partition.h"
#include "gtest/gtest.h"

namespace weft {
namespace worker {
namespace {

constexpr char kLocalTask[] = "/job:worker/task:0";
constexpr char kLocalCpu[] = "/job:worker/task:0/device:CPU:0";
constexpr char kPeerCpu[] = "/job:ps/task:0/device:CPU:0";

// Records pulls; answers them when told (or at once with `immediate`).
class FakePuller : public TensorPullerInterface {
 public:
  struct Pull {
    std::string task;
    int64_t step_id;
    std::string key;
    Rendezvous::DoneCallback done;
  };
  std::function<void()> PullAsync(const std::string& task, int64_t step_id, const std::string& key,
                                  Rendezvous::DoneCallback done) override {
    if (immediate) {
      done(absl::OkStatus(), Tensor::Scalar<float>(42), false);
      return nullptr;
    }
    pulls.push_back(Pull{task, step_id, key, std::move(done)});
    return [this] { ++cancelled; };
  }
  bool immediate = false;
  std::vector<Pull> pulls;
  int cancelled = 0;
};

TEST(RemoteRendezvousTest, LocalKeysStayLocalAndPeerKeysArePulled) {
  FakePuller puller;
  auto r = RemoteRendezvous::Create(kLocalTask, 7, &puller);
  const std::string local_key = RendezvousKey(kLocalCpu, 0, kPeerCpu, "a:0", 8);
  ASSERT_TRUE(r->Send(local_key, Tensor::Scalar<float>(1), false).ok());
  Tensor got;
  r->RecvAsync(local_key, [&](const absl::Status& s, const Tensor& t, bool) {
    EXPECT_TRUE(s.ok()) << s;
    got = t;
  });
  EXPECT_EQ(*got.data<float>(), 1.0f);
  EXPECT_TRUE(puller.pulls.empty());

  const std::string peer_key = RendezvousKey(kPeerCpu, 0, kLocalCpu, "w:0", 8);
  absl::Status status = absl::UnknownError("not called");
  r->RecvAsync(peer_key, [&](const absl::Status& s, const Tensor& t, bool) {
    status = s;
    got = t;
  });
  ASSERT_EQ(puller.pulls.size(), 1u);
  EXPECT_EQ(puller.pulls[0].task, "/job:ps/task:0");
  EXPECT_EQ(puller.pulls[0].step_id, 7);  // the rendezvous's step, not the key's iteration
  EXPECT_EQ(puller.pulls[0].key, peer_key);
  EXPECT_EQ(r->NumPendingPulls(), 1);
  puller.pulls[0].done(absl::OkStatus(), Tensor::Scalar<float>(3), false);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(*got.data<float>(), 3.0f);
  EXPECT_EQ(r->NumPendingPulls(), 0);
}

TEST(RemoteRendezvousTest, AbortFailsAndCancelsPullsAndDropsLateAnswers) {
  FakePuller puller;
  auto r = RemoteRendezvous::Create(kLocalTask, 1, &puller);
  absl::Status status;
  int calls = 0;
  r->RecvAsync(RendezvousKey(kPeerCpu, 0, kLocalCpu, "w:0", 1), [&](const absl::Status& s, const Tensor&, bool) {
    status = s;
    ++calls;
  });
  r->StartAbort(absl::AbortedError("ps died"));
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(puller.cancelled, 1);
  puller.pulls[0].done(absl::CancelledError("cancelled"), Tensor(), false);  // the late answer
  EXPECT_EQ(calls, 1);
  // Later pulls fail at once, without reaching the puller.
  r->RecvAsync(RendezvousKey(kPeerCpu, 0, kLocalCpu, "v:0", 1),
               [&](const absl::Status& s, const Tensor&, bool) { status = s; });
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(puller.pulls.size(), 1u);
}

// Regression: a pull that completes inside PullAsync, whose receiver drops the
// last other reference to the rendezvous, must not leave RecvAsync running on
// a freed object (caught by ASan as a heap-use-after-free).
TEST(RemoteRendezvousTest, PullCompletingInsidePullAsyncMayReleaseTheRendezvous) {
  FakePuller puller;
  puller.immediate = true;
  auto r = RemoteRendezvous::Create(kLocalTask, 1, &puller);
  Rendezvous* raw = r.get();
  float got = 0;
  raw->RecvAsync(RendezvousKey(kPeerCpu, 0, kLocalCpu, "w:0", 1), [&](const absl::Status& s, const Tensor& t, bool) {
    ASSERT_TRUE(s.ok()) << s;
    got = *t.data<float>();
    r.reset();  // the step is over: its owner lets go
  });
  EXPECT_EQ(got, 42.0f);
  EXPECT_EQ(r, nullptr);
}

TEST(RemoteRendezvousTest, WithoutAPullerPeerKeysAreFailedPrecondition) {
  auto r = RemoteRendezvous::Create(kLocalTask, 1, nullptr);
  absl::Status status;
  r->RecvAsync(RendezvousKey(kPeerCpu, 0, kLocalCpu, "w:0", 1),
               [&](const absl::Status& s, const Tensor&, bool) { status = s; });
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  r->RecvAsync("not a key", [&](const absl::Status& s, const Tensor&, bool) { status = s; });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

}  // namespace
}  // namespace worker
}  // namespace weft
