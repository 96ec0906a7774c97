#include "runtime/resource_mgr.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace weft {

absl::StatusOr<Tensor> ResourceMgr::LookupOrCreateVariable(const std::string& name, DType dtype,
                                                           const TensorShape& shape,
                                                           const std::function<absl::Status(Tensor*)>& init) {
  absl::MutexLock lock(&mu_);
  auto it = variables_.find(name);
  if (it != variables_.end()) {
    if (it->second.dtype() != dtype || it->second.shape() != shape) {
      return absl::FailedPreconditionError(absl::StrCat(
          "variable '", name, "' exists as ", DTypeName(it->second.dtype()), it->second.shape().DebugString(),
          " but the graph declares ", DTypeName(dtype), shape.DebugString()));
    }
    return it->second;
  }
  absl::StatusOr<Tensor> allocated = Tensor::Allocate(dtype, shape);
  if (!allocated.ok()) return Annotate(allocated.status(), absl::StrCat("variable '", name, "'"));
  Tensor t = *std::move(allocated);
  absl::Status s = init(&t);
  if (!s.ok()) return s;
  variables_.emplace(name, t);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  return t;
}

absl::StatusOr<Tensor> ResourceMgr::LookupVariable(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = variables_.find(name);
  if (it == variables_.end()) return absl::NotFoundError(absl::StrCat("no variable named '", name, "'"));
  return it->second;
}

void ResourceMgr::SetVariable(const std::string& name, Tensor value) {
  absl::MutexLock lock(&mu_);
  variables_[name] = std::move(value);
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

std::vector<std::string> ResourceMgr::VariableNames() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [n, t] : variables_) names.push_back(n);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::shared_ptr<void>> ResourceMgr::LookupOrCreateErased(
    const std::string& name, std::type_index type,
    const std::function<absl::StatusOr<std::shared_ptr<void>>()>& create) {
  std::shared_ptr<Slot> slot;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<Slot>& s = resources_[name];
    if (s == nullptr) s = std::make_shared<Slot>();
    slot = s;
  }
  // Created under the slot's lock only, so a slow `create` (loading a data
  // set) holds up nobody but callers of the same name.
  absl::MutexLock lock(&slot->mu);
  if (slot->value != nullptr) {
    if (slot->type != type) {
      return absl::FailedPreconditionError(absl::StrCat("resource '", name, "' exists as ", slot->type.name(),
                                                        ", not as the requested ", type.name()));
    }
    return slot->value;
  }
  absl::StatusOr<std::shared_ptr<void>> made = create();
  if (!made.ok()) return made.status();
  if (*made == nullptr) {
    return absl::InternalError(absl::StrCat("creating resource '", name, "' returned null"));
  }
  slot->value = *made;
  slot->type = type;
  return slot->value;
}

std::vector<std::string> ResourceMgr::ResourceNames() const {
  std::vector<std::shared_ptr<Slot>> slots;
  std::vector<std::string> names;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [n, s] : resources_) {
      names.push_back(n);
      slots.push_back(s);
    }
  }
  // A slot whose creation failed holds no resource; one being created is
  // waited for.
  std::vector<std::string> out;
  for (size_t i = 0; i < slots.size(); ++i) {
    absl::MutexLock lock(&slots[i]->mu);
    if (slots[i]->value != nullptr) out.push_back(names[i]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool ResourceMgr::Empty() const {
  absl::MutexLock lock(&mu_);
  return variables_.empty() && resources_.empty();
}

void ResourceMgr::Clear() {
  absl::flat_hash_map<std::string, std::shared_ptr<Slot>> resources;
  {
    absl::MutexLock lock(&mu_);
    variables_.clear();
    generation_.fetch_add(1, std::memory_order_acq_rel);
    resources.swap(resources_);
  }
  // Destroyed outside the lock: a resource's destructor may take a while
  // (joining an input pipeline's thread).
}

}  // namespace weft
