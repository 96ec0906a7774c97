// Built without CUDA: no GPUs.
#include "runtime/gpu/gpu_devices.h"

namespace weft {
namespace gpu {

bool BuiltWithGpu() { return false; }
absl::StatusOr<int> GpuCount() { return 0; }
absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateGpuDevices(const std::string&, int) {
  return std::vector<std::unique_ptr<Device>>();
}

}  // namespace gpu
}  // namespace weft
