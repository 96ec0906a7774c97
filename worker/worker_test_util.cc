#include "worker/worker_test_util.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "graph/builder.h"
#include "graph/partition.h"
#include "graph/placer.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace worker {
namespace testing {

absl::StatusOr<SplitGraph> BuildSplitGraph(int64_t n, int64_t k, int64_t m, uint64_t seed) {
  SplitGraph out;
  out.whole = std::make_unique<Graph>();
  GraphBuilder b(out.whole.get());
  b.set_device(kTask0Cpu);
  Output x = b.Placeholder(DType::kFloat32, {n, k}, "x");
  Output h = b.Op("Relu", {x}, {}, "h");
  b.set_device(kTask1Cpu);
  Output w = b.Const(weft::testing::RandomTensor({k, m}, seed), "w");
  Output y = b.Op("MatMul", {h, w}, {}, "y");
  b.set_device(kTask0Cpu);
  b.Op("Tanh", {y}, {}, "z");
  RETURN_IF_ERROR(b.status());
  RETURN_IF_ERROR(PlaceGraph(out.whole.get(), {kTask0Cpu, kTask1Cpu}, kTask0Cpu));
  ASSIGN_OR_RETURN(auto parts, PartitionGraph(*out.whole));
  if (parts.size() != 2) return absl::InternalError("expected two partitions");
  out.part0 = parts[kTask0Cpu];
  out.part1 = parts[kTask1Cpu];
  return out;
}

RegisterGraphRequest MakeRegisterRequest(const GraphDef& def, std::vector<std::string> feeds,
                                         std::vector<std::string> fetches, std::vector<std::string> targets) {
  RegisterGraphRequest r;
  *r.mutable_graph_def() = def;
  for (auto& f : feeds) r.add_feed(f);
  for (auto& f : fetches) r.add_fetch(f);
  for (auto& t : targets) r.add_target(t);
  return r;
}

absl::Status WaitFor(const std::function<void(StatusCallback)>& start, absl::Duration timeout) {
  // Shared with the callback, which may outlive this wait when it times out.
  struct Done {
    absl::Notification n;
    absl::Status status;
  };
  auto done = std::make_shared<Done>();
  start([done](const absl::Status& s) {
    done->status = s;
    done->n.Notify();
  });
  if (!done->n.WaitForNotificationWithTimeout(timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("the call did not complete within ", absl::FormatDuration(timeout)));
  }
  return done->status;
}

}  // namespace testing
}  // namespace worker
}  // namespace weft
