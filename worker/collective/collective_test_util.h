// Helpers shared by the collective tests: seeded random inputs, the
// reference sum (computed in double), groups, async fan-out over ranks and
// all-reduces checked against the reference.
//
// Thread-safety: test-only helpers; RunOnAllRanks is called from one thread.
#ifndef WEFT_WORKER_COLLECTIVE_COLLECTIVE_TEST_UTIL_H_
#define WEFT_WORKER_COLLECTIVE_COLLECTIVE_TEST_UTIL_H_

#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/tensor.h"
#include "worker/collective/collective_executor.h"
#include "common/test_util.h"
#include "gtest/gtest.h"
#include "worker/collective/collective_types.h"

namespace weft {
namespace collective {
namespace testing {

inline CollectiveGroup MakeGroup(int n, int rank, const std::vector<std::string>& addresses = {},
                                 int64_t group_key = 7) {
  CollectiveGroup g;
  g.group_key = group_key;
  g.rank = rank;
  for (int i = 0; i < n; ++i) {
    g.members.push_back({absl::StrCat("/job:worker/task:", i), addresses.empty() ? "" : addresses[i]});
  }
  return g;
}

// float32 in [-1, 1), seeded by (seed, rank).
inline Tensor RandomFloats(int64_t n, uint32_t seed, int rank) {
  Tensor t(DType::kFloat32, TensorShape{n});
  std::mt19937 rng(seed * 131 + rank);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (float& v : t.flat<float>()) v = dist(rng);
  return t;
}

// Element-wise sum over `inputs` in double.
inline std::vector<double> ReferenceSum(const std::vector<Tensor>& inputs) {
  std::vector<double> sum(inputs.empty() ? 0 : inputs[0].NumElements(), 0.0);
  for (const Tensor& t : inputs) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += t.flat<float>()[i];
  }
  return sum;
}

// Expects `t` to hold `ref` within float tolerance; reports the first miss.
inline void ExpectNear(const Tensor& t, const std::vector<double>& ref, const std::string& what) {
  ASSERT_EQ(t.NumElements(), static_cast<int64_t>(ref.size())) << what;
  const float* v = t.data<float>();
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::abs(v[i] - ref[i]) > 1e-5 + 1e-6 * std::abs(ref[i])) {
      ADD_FAILURE() << what << ": element " << i << " is " << v[i] << ", expected " << ref[i];
      return;
    }
  }
}

// Starts fn(rank, done) for every rank and waits for all the dones, at most
// `timeout` in all; returns each rank's status. A rank whose done has not
// run by then fails the test and gets DEADLINE_EXCEEDED.
inline std::vector<absl::Status> RunOnAllRanks(int n, const std::function<void(int, StatusCallback)>& fn,
                                               absl::Duration timeout = weft::testing::kWaitTimeout) {
  // Shared with the callbacks, which may outlive a wait that timed out.
  struct Rank {
    absl::Notification done;
    absl::Status status;
  };
  std::vector<std::shared_ptr<Rank>> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(std::make_shared<Rank>());
  for (int r = 0; r < n; ++r) {
    fn(r, [rank = ranks[r]](const absl::Status& s) {
      rank->status = s;
      rank->done.Notify();
    });
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<absl::Status> statuses(n);
  for (int r = 0; r < n; ++r) {
    if (ranks[r]->done.WaitForNotificationWithDeadline(deadline)) {
      statuses[r] = ranks[r]->status;
    } else {
      ADD_FAILURE() << "rank " << r << " of " << n << " did not finish its collective within " << timeout;
      statuses[r] = absl::DeadlineExceededError(absl::StrCat("rank ", r, " did not finish"));
    }
  }
  return statuses;
}

// All-reduces random float32 tensors of `size` elements (seeded by `seed`
// and the rank) on all n ranks, starting each with start(rank, tensor,
// done), and checks every rank's status and sum against the reference.
// `what` names the case in failures.
inline void ExpectAllReduceMatchesReference(int n, int64_t size, uint32_t seed, const std::string& what,
                                            const std::function<void(int, Tensor*, StatusCallback)>& start) {
  std::vector<Tensor> inputs, values;
  for (int r = 0; r < n; ++r) {
    inputs.push_back(RandomFloats(size, seed, r));
    values.push_back(inputs.back().DeepCopy());
  }
  const std::vector<double> ref = ReferenceSum(inputs);
  auto statuses = RunOnAllRanks(n, [&](int r, StatusCallback done) { start(r, &values[r], std::move(done)); });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << what << " rank " << r << ": " << statuses[r];
    ExpectNear(values[r], ref, absl::StrCat(what, " rank ", r));
  }
}

// All-reduces tensors of each of `sizes` elements on the n ranks of
// `addresses` through executor(rank), with chunks of `chunk_bytes`, one
// collective (instance first_instance + 1, + 2, ...) per size, and checks
// every sum against the reference.
inline void ExpectAllReducesThroughExecutors(const std::vector<std::string>& addresses, size_t chunk_bytes,
                                             const std::vector<int64_t>& sizes,
                                             const std::function<CollectiveExecutor*(int)>& executor,
                                             int64_t first_instance = 0) {
  const int n = static_cast<int>(addresses.size());
  int64_t instance = first_instance;
  for (int64_t size : sizes) {
    ++instance;
    ExpectAllReduceMatchesReference(n, size, static_cast<uint32_t>(instance), absl::StrCat("n=", n, " size=", size),
                                    [&](int r, Tensor* t, StatusCallback done) {
                                      CollectiveParams p;
                                      p.group = MakeGroup(n, r, addresses);
                                      p.instance_key = instance;
                                      p.step_id = 1;
                                      p.chunk_bytes = chunk_bytes;
                                      p.timeout = absl::Seconds(30);
                                      executor(r)->AllReduceAsync(p, t, std::move(done));
                                    });
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace testing
}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_COLLECTIVE_TEST_UTIL_H_
