#include "runtime/gpu/gpu_devices.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "graph/placer.h"
#include "runtime/gpu/gpu_device.h"
#include "runtime/kernels/cuda/cuda_util.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu {
namespace {

// Tells the placer which ops this binary can run on a GPU, before main.
const bool kPlacerKnowsGpuKernels = [] {
  SetGpuKernelAvailability([](absl::string_view op) { return KernelRegistry::Global()->Has(op, "GPU"); });
  return true;
}();

}  // namespace

bool BuiltWithGpu() { return true; }

absl::StatusOr<int> GpuCount() { return cuda::DeviceCount(); }

absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateGpuDevices(const std::string& prefix, int max_gpus) {
  std::vector<std::unique_ptr<Device>> devices;
  if (max_gpus == 0) return devices;
  absl::StatusOr<int> count = GpuCount();
  if (!count.ok()) return count.status();
  int n = *count;
  if (max_gpus >= 0 && max_gpus < n) n = max_gpus;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<std::unique_ptr<GpuDevice>> d = GpuDevice::Create(absl::StrCat(prefix, "/device:GPU:", i), i);
    if (!d.ok()) return d.status();
    devices.push_back(*std::move(d));
  }
  return devices;
}

}  // namespace gpu
}  // namespace weft
