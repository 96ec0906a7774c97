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
#include "common/tensor.h"

namespace weft {

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
};

}  // namespace weft

#endif  // WEFT_RUNTIME_COLLECTIVE_RUNTIME_H_
