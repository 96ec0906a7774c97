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
}

std::vector<std::string> ResourceMgr::VariableNames() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [n, t] : variables_) names.push_back(n);
  std::sort(names.begin(), names.end());
  return names;
}

void ResourceMgr::Clear() {
  absl::MutexLock lock(&mu_);
  variables_.clear();
}

}  // namespace weft
