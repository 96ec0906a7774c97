// Per-device state that outlives a step: variables, and other resources
// (e.g. an input pipeline's iterator), each by name.
//
// A variable's Tensor is created and initialised by the first step that reads
// it; ops that update a variable write into its buffer in place, and the
// executor's graph edges order those writes after every read in the step.
//
// A resource is any object a kernel keeps between steps, shared by
// std::shared_ptr so that Clear() never frees one a running step still uses.
// Resources and variables are separate namespaces.
//
// Thread-safety: thread-safe. The mutex guards the maps, not the payloads: a
// resource shared by concurrent steps synchronises itself.
//
// Containers: a Variable node with a non-empty attr `container` keeps its
// value in a store shared by every session of the task that names the same
// container on the same device (a worker's GraphMgr holds them), not in its
// session's. ResourceContainerFn is how an executor reaches those stores.
#ifndef WEFT_RUNTIME_RESOURCE_MGR_H_
#define WEFT_RUNTIME_RESOURCE_MGR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <typeindex>
#include <typeinfo>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/tensor.h"

namespace weft {

class ResourceMgr;

// The store of container `container` on the executor's device, made if new;
// it outlives every kernel the executor builds. The error (a quota, a bad
// name) fails the kernel's construction.
using ResourceContainerFn = std::function<absl::StatusOr<ResourceMgr*>(const std::string& container)>;

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
  // Counts the changes to which buffer holds which variable (a creation, a
  // SetVariable, Clear), not to the values: a step recorded with the
  // variables' buffers (ExecutorOptions::record_device_steps) stays valid
  // while this number does not move.
  uint64_t variables_generation() const { return generation_.load(std::memory_order_acquire); }

  // Returns the resource `name`, creating it with `create` on first use. Two
  // callers racing on a new name run `create` once: the second waits for the
  // first (creating one name never blocks lookups of others). A failed
  // `create` leaves no resource, and returns its error; the next call tries
  // again. A resource that exists with another type is FAILED_PRECONDITION.
  // REQUIRES: `create` does not look up `name` in this ResourceMgr.
  template <typename T>
  absl::StatusOr<std::shared_ptr<T>> LookupOrCreate(const std::string& name,
                                                     const std::function<absl::StatusOr<std::shared_ptr<T>>()>& create) {
    absl::StatusOr<std::shared_ptr<void>> r =
        LookupOrCreateErased(name, std::type_index(typeid(T)), [&]() -> absl::StatusOr<std::shared_ptr<void>> {
          absl::StatusOr<std::shared_ptr<T>> made = create();
          if (!made.ok()) return made.status();
          return std::shared_ptr<void>(*std::move(made));
        });
    if (!r.ok()) return r.status();
    return std::static_pointer_cast<T>(*std::move(r));
  }
  // Names of the resources that exist, sorted; waits for creations under way.
  std::vector<std::string> ResourceNames() const;

  // True when it holds no variable and no resource.
  bool Empty() const;

  // Drops every variable and resource. A resource still held by a running
  // kernel lives until that kernel lets go of it.
  void Clear();

 private:
  // One resource name; its mutex serialises creation.
  struct Slot {
    absl::Mutex mu;
    std::shared_ptr<void> value ABSL_GUARDED_BY(mu);
    std::type_index type ABSL_GUARDED_BY(mu) = std::type_index(typeid(void));
  };

  absl::StatusOr<std::shared_ptr<void>> LookupOrCreateErased(
      const std::string& name, std::type_index type,
      const std::function<absl::StatusOr<std::shared_ptr<void>>()>& create);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Tensor> variables_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> generation_{0};
  absl::flat_hash_map<std::string, std::shared_ptr<Slot>> resources_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft

#endif  // WEFT_RUNTIME_RESOURCE_MGR_H_
