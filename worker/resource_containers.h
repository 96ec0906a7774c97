// ResourceContainers: a task's variable stores that outlive sessions.
//
// A Variable node with a non-empty attr `container` keeps its value in the
// store of (container, device) instead of its session's, so every session
// naming the same container and variable on the same device shares one
// buffer, and the value survives CloseSession and the deregistration of
// every graph. The names are the workers' view: the master has already
// scoped a user's name by its owner, and the worker trusts the master.
//
// A graph holds the stores its kernels use (Get returns shared ownership),
// so Reset clears a store in place, and the next read of one of its
// variables re-creates it from its initializer, in every session alike. A
// store that no graph holds is dropped by Reset, and when it holds nothing,
// by Get to make room under the quota.
//
// Thread-safety: thread-safe.
#ifndef WEFT_WORKER_RESOURCE_CONTAINERS_H_
#define WEFT_WORKER_RESOURCE_CONTAINERS_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/resource_mgr.h"

namespace weft {
namespace worker {

// The longest container name a task accepts (the master's scoped names are
// far shorter), and the most names one ResetContainers may carry.
inline constexpr size_t kMaxContainerNameBytes = 1024;
inline constexpr int kMaxResetContainers = 1024;

class ResourceContainers {
 public:
  // `task` names this task in messages; `max_stores` bounds the stores held
  // at once (--max_containers).
  ResourceContainers(std::string task, int max_stores) : task_(std::move(task)), max_stores_(max_stores) {}

  // The store of `container` on `device`, made if new. INVALID_ARGUMENT for
  // an empty name or one over kMaxContainerNameBytes; RESOURCE_EXHAUSTED
  // naming --max_containers when a new store would exceed the quota.
  absl::StatusOr<std::shared_ptr<ResourceMgr>> Get(const std::string& container, const std::string& device);
  // The store, or nullptr when there is none (for tests and tools).
  std::shared_ptr<ResourceMgr> Find(const std::string& container, const std::string& device) const;

  // Clears the stores of `containers` on every device, or every store with
  // `all`; returns how many stores it cleared.
  int Reset(const std::vector<std::string>& containers, bool all);

  // Containers with a store now, sorted, each once.
  std::vector<std::string> Names() const;

 private:
  using Key = std::pair<std::string, std::string>;  // (container, device)

  // Drops the stores only the map holds that hold nothing.
  void DropUnusedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string task_;
  const int max_stores_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, std::shared_ptr<ResourceMgr>> stores_ ABSL_GUARDED_BY(mu_);
};

}  // namespace worker
}  // namespace weft

#endif  // WEFT_WORKER_RESOURCE_CONTAINERS_H_
