// Per-device state that outlives a step: variables, by name.
//
// A variable's Tensor is created and initialised by the first step that reads
// it; ops that update a variable write into its buffer in place, and the
// executor's graph edges order those writes after every read in the step.
//
// Thread-safety: thread-safe. The mutex guards the map, not the payloads.
#ifndef WEFT_RUNTIME_RESOURCE_MGR_H_
#define WEFT_RUNTIME_RESOURCE_MGR_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/tensor.h"

namespace weft {

class ResourceMgr {
 public:
  // Returns the variable `name`, creating it with `init` on first use. A later
  // call with another dtype or shape is FAILED_PRECONDITION.
  absl::StatusOr<Tensor> LookupOrCreateVariable(const std::string& name, DType dtype, const TensorShape& shape,
                                                const std::function<absl::Status(Tensor*)>& init);
  // NOT_FOUND when the variable does not exist.
  absl::StatusOr<Tensor> LookupVariable(const std::string& name) const;
  // Replaces (or creates) a variable's value, e.g. on restore.
  void SetVariable(const std::string& name, Tensor value);
  std::vector<std::string> VariableNames() const;
  void Clear();

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Tensor> variables_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft

#endif  // WEFT_RUNTIME_RESOURCE_MGR_H_
