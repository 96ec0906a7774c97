// Discovery of the GPUs a process may use, for code that builds with and
// without CUDA (the worker, the trainer, the CLI). Built without CUDA, every
// function reports no GPU.
//
// Thread-safety: thread-safe.
#ifndef WEFT_RUNTIME_GPU_GPU_DEVICES_H_
#define WEFT_RUNTIME_GPU_GPU_DEVICES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/device.h"

namespace weft {
namespace gpu {

// True when this binary was built with CUDA (--config=cuda).
bool BuiltWithGpu();
// How many GPUs this process can see: 0 when built without CUDA or when no
// GPU is present (no NVIDIA driver, no device, CUDA_VISIBLE_DEVICES="");
// UNAVAILABLE with CUDA's message when a driver is there but CUDA cannot use
// it (see cuda::DeviceCount).
absl::StatusOr<int> GpuCount();
// Creates "<prefix>/device:GPU:i" for i < min(max_gpus, GpuCount())
// (max_gpus < 0: all of them). An empty list without CUDA, without a GPU or
// for max_gpus == 0; GpuCount's error on a machine whose driver is broken,
// and the CUDA error naming the call when a visible GPU cannot be opened.
absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateGpuDevices(const std::string& prefix, int max_gpus);

}  // namespace gpu
}  // namespace weft

#endif  // WEFT_RUNTIME_GPU_GPU_DEVICES_H_
