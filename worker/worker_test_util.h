// Shared by the worker tests: a graph split across two tasks, and a way to
// wait for an asynchronous call.
#ifndef WEFT_WORKER_WORKER_TEST_UTIL_H_
#define WEFT_WORKER_WORKER_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "graph/graph.h"
#include "proto/graph.pb.h"
#include "proto/worker_service.pb.h"
#include "worker/worker_interface.h"

namespace weft {
namespace worker {
namespace testing {

inline constexpr char kTask0[] = "/job:worker/task:0";
inline constexpr char kTask1[] = "/job:worker/task:1";
inline constexpr char kTask0Cpu[] = "/job:worker/task:0/device:CPU:0";
inline constexpr char kTask1Cpu[] = "/job:worker/task:1/device:CPU:0";

// x [n,k] fed on task 0 -> h = Relu(x) on task 0 -> y = MatMul(h, w) on task 1
// (w a random Const [k,m] there) -> z = Tanh(y) back on task 0. Task 0's
// partition both sends (h) and receives (y): a round trip.
struct SplitGraph {
  std::unique_ptr<Graph> whole;  // placed, unpartitioned: for RunGraphOnce
  GraphDef part0;                // feeds x, fetches z
  GraphDef part1;                // fetches y
};
absl::StatusOr<SplitGraph> BuildSplitGraph(int64_t n, int64_t k, int64_t m, uint64_t seed);

RegisterGraphRequest MakeRegisterRequest(const GraphDef& def, std::vector<std::string> feeds,
                                         std::vector<std::string> fetches, std::vector<std::string> targets = {});

// Calls start(done) and blocks until done runs, at most `timeout`; returns
// its status, or DEADLINE_EXCEEDED saying the call never completed (the test
// has failed then; what the late call writes is not to be relied on).
absl::Status WaitFor(const std::function<void(StatusCallback)>& start,
                     absl::Duration timeout = absl::Seconds(60));

}  // namespace testing
}  // namespace worker
}  // namespace weft

#endif  // WEFT_WORKER_WORKER_TEST_UTIL_H_
