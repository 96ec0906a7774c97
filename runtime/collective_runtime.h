// The seam between collective kernels (CollectiveAllReduce) and whatever
// moves their data: a worker gives its executors an implementation backed by
// the ring all-reduce over gRPC (worker/collective/worker_collectives.h).
//
// Thread-safety: implementations are thread-safe.
#ifndef WEFT_RUNTIME_COLLECTIVE_RUNTIME_H_
#define WEFT_RUNTIME_COLLECTIVE_RUNTIME_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/tensor.h"

namespace weft {

// A collective in flight on this task, and whom it waits for
// (CollectiveRuntime::Pending).
struct CollectiveWait {
  int64_t step_id = 0;
  std::string description;  // "all-reduce of float[1024] (group 1, ...)"
  std::string recv_from;    // the task whose chunks it receives
  int chunks_missing = 0;   // of chunks_total, not received yet
  int chunks_total = 0;
  std::string send_to;      // the task it sends to
  int sends_pending = 0;    // chunks not sent yet
  double elapsed_seconds = 0;
};

class CollectiveRuntime {
 public:
  struct AllReduceArgs {
    int64_t group_key = 0;
    int64_t instance_key = 0;
    int64_t step_id = 0;
    // The group's tasks in rank order ("/job:worker/task:0", ...); this
    // process's rank is its own task's index.
    std::vector<std::string> tasks;
  };
  virtual ~CollectiveRuntime() = default;
  // Sums each of `tensors` element-wise over the group, in place, as one
  // fused collective. `done` runs once. REQUIRES: the tensors stay alive and
  // untouched until then.
  virtual void AllReduceAsync(const AllReduceArgs& args, std::vector<Tensor*> tensors,
                              std::function<void(const absl::Status&)> done) = 0;
  // Fails the step's collectives (AbortStep) and forgets its state (CleanupStep).
  virtual void AbortStep(int64_t step_id, const absl::Status& status) {}
  virtual void CleanupStep(int64_t step_id) {}
  // The collectives under way now and what each still waits for; only
  // called on request (diagnosis), never by a step.
  virtual std::vector<CollectiveWait> Pending() const { return {}; }
};

// A CollectiveAllReduce's `group_tasks` attr (comma-separated, rank order)
// as AllReduceArgs::tasks: an error unless a group of two or more names one
// task per member.
inline absl::StatusOr<std::vector<std::string>> ParseGroupTasks(const std::string& tasks, int64_t group_size) {
  std::vector<std::string> out;
  if (!tasks.empty()) out = absl::StrSplit(tasks, ',');
  if (group_size > 1 && static_cast<int64_t>(out.size()) != group_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("group_tasks names ", out.size(), " task(s) for group_size ", group_size));
  }
  return out;
}

}  // namespace weft

#endif  // WEFT_RUNTIME_COLLECTIVE_RUNTIME_H_
