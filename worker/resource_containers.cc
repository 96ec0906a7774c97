#include "worker/resource_containers.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace weft {
namespace worker {

absl::StatusOr<std::shared_ptr<ResourceMgr>> ResourceContainers::Get(const std::string& container,
                                                                     const std::string& device) {
  if (container.empty() || container.size() > kMaxContainerNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("container name of ", container.size(), " bytes on task ", task_,
                                                   ": it must have 1..", kMaxContainerNameBytes));
  }
  absl::MutexLock lock(&mu_);
  auto it = stores_.find(Key(container, device));
  if (it != stores_.end()) return it->second;
  if (static_cast<int64_t>(stores_.size()) >= max_stores_) DropUnusedLocked();
  if (static_cast<int64_t>(stores_.size()) >= max_stores_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "task ", task_, " already holds ", stores_.size(), " container stores, its quota (--max_containers=",
        max_stores_, "); container '", container, "' on ", device,
        " cannot be made: Reset containers no longer needed or raise the quota"));
  }
  auto store = std::make_shared<ResourceMgr>();
  stores_.emplace(Key(container, device), store);
  return store;
}

std::shared_ptr<ResourceMgr> ResourceContainers::Find(const std::string& container, const std::string& device) const {
  absl::MutexLock lock(&mu_);
  auto it = stores_.find(Key(container, device));
  return it == stores_.end() ? nullptr : it->second;
}

void ResourceContainers::DropUnusedLocked() {
  for (auto it = stores_.begin(); it != stores_.end();) {
    // use_count 1: no graph holds it, and none can take it without mu_.
    if (it->second.use_count() == 1 && it->second->Empty()) {
      stores_.erase(it++);
    } else {
      ++it;
    }
  }
}

int ResourceContainers::Reset(const std::vector<std::string>& containers, bool all) {
  const absl::flat_hash_set<std::string> wanted(containers.begin(), containers.end());
  std::vector<std::shared_ptr<ResourceMgr>> cleared;  // cleared outside the lock
  {
    absl::MutexLock lock(&mu_);
    for (auto it = stores_.begin(); it != stores_.end();) {
      if (!all && !wanted.contains(it->first.first)) {
        ++it;
        continue;
      }
      cleared.push_back(it->second);
      // A store a graph holds stays, cleared: its kernels resolved it once
      // and a later session naming the container must find the same one.
      if (it->second.use_count() == 2) {
        stores_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  for (const auto& store : cleared) store->Clear();
  return static_cast<int>(cleared.size());
}

std::vector<std::string> ResourceContainers::Names() const {
  std::vector<std::string> names;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, store] : stores_) names.push_back(key.first);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

}  // namespace worker
}  // namespace weft
