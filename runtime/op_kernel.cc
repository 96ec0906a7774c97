#include "runtime/op_kernel.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "runtime/device.h"

namespace weft {

Tensor* OpKernelContext::allocate_output(int i, DType dtype, const TensorShape& shape) {
  // Never throws: Tensor::Allocate checks the sizes and catches the
  // allocator's exhaustion, so a shape a request asked for fails its step.
  absl::StatusOr<Tensor> t = Tensor::Allocate(dtype, shape, p_.device->allocator());
  if (!t.ok()) {
    absl::StatusCode code = t.status().code();
    // An unknown dim here is the kernel's mistake, not the request's.
    if (!shape.IsFullyDefined()) code = absl::StatusCode::kInternal;
    SetStatus(absl::Status(code, absl::StrCat("node ", p_.node->DebugName(), ": output ", i, ": ",
                                              t.status().message())));
    return nullptr;
  }
  p_.outputs[i] = *std::move(t);
  return &p_.outputs[i];
}

absl::StatusOr<Tensor> OpKernelContext::allocate_temp(DType dtype, const TensorShape& shape) {
  absl::StatusOr<Tensor> t = Tensor::Allocate(dtype, shape, p_.device->allocator());
  if (!t.ok()) {
    return absl::Status(t.status().code(),
                        absl::StrCat("node ", p_.node->DebugName(), ": scratch: ", t.status().message()));
  }
  return t;
}

ResourceMgr* OpKernelContext::resources() const {
  return p_.resources != nullptr ? p_.resources : p_.device->resources();
}
ThreadPool* OpKernelContext::intra_op_pool() const { return p_.device->intra_op_pool(); }

void AsyncOpKernel::Compute(OpKernelContext* ctx) {
  absl::Notification done;
  ComputeAsync(ctx, [&done] { done.Notify(); });
  done.WaitForNotification();
}

KernelRegistry* KernelRegistry::Global() {
  static KernelRegistry* const r = new KernelRegistry();
  return r;
}

void KernelRegistry::Register(const std::string& op, const std::string& device_type, KernelFactory factory) {
  if (!factories_.emplace(absl::StrCat(op, "@", device_type), std::move(factory)).second) {
    std::fprintf(stderr, "weft: duplicate kernel registration %s on %s\n", op.c_str(), device_type.c_str());
    std::abort();
  }
}

bool KernelRegistry::Has(absl::string_view op, absl::string_view device_type) const {
  return factories_.contains(absl::StrCat(op, "@", device_type));
}

absl::StatusOr<std::unique_ptr<OpKernel>> KernelRegistry::Create(const Node* node, Device* device,
                                                                  const ResourceContainerFn* containers) const {
  auto it = factories_.find(absl::StrCat(node->op(), "@", device->device_type()));
  if (it == factories_.end()) {
    return absl::NotFoundError(absl::StrCat("no ", device->device_type(), " kernel for op '", node->op(),
                                            "' (node '", node->name(), "')"));
  }
  OpKernelConstruction ctx(node, device, containers);
  std::unique_ptr<OpKernel> kernel = it->second(&ctx);
  if (!ctx.status().ok()) {
    return absl::Status(ctx.status().code(), absl::StrCat("node ", node->DebugName(), ": ", ctx.status().message()));
  }
  return kernel;
}

}  // namespace weft
