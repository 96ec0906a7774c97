#include "runtime/gpu/gpu_test_util.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "runtime/gpu/gpu_device.h"
#include "runtime/gpu/gpu_devices.h"

namespace weft {
namespace gpu {

GpuDevice* TestGpu() {
  static GpuDevice* const gpu = []() -> GpuDevice* {
    if (VisibleGpuCount() == 0) return nullptr;
    absl::StatusOr<std::unique_ptr<GpuDevice>> d = GpuDevice::Create("/device:GPU:0", 0);
    if (!d.ok()) {
      std::fprintf(stderr, "TestGpu: %s\n", d.status().ToString().c_str());
      return nullptr;
    }
    return d->release();  // never destroyed: tests' static tensors may outlive main
  }();
  return gpu;
}

absl::StatusOr<Tensor> ToDevice(GpuDevice* gpu, const Tensor& host) {
  if (!host.on_host()) return absl::InvalidArgumentError("ToDevice: the tensor is already on a device");
  absl::StatusOr<Tensor> dev = Tensor::Allocate(host.dtype(), host.shape(), gpu->allocator());
  if (!dev.ok()) return dev.status();
  absl::Status s = gpu->CopyHostToDevice(host.raw_data(), dev->raw_data(), host.TotalBytes());
  if (s.ok()) s = gpu->Synchronize();
  if (!s.ok()) return s;
  return dev;
}

absl::StatusOr<Tensor> ToHost(GpuDevice* gpu, const Tensor& dev) {
  if (dev.on_host()) return absl::InvalidArgumentError("ToHost: the tensor is not on a device");
  absl::StatusOr<Tensor> host = Tensor::Allocate(dev.dtype(), dev.shape());
  if (!host.ok()) return host.status();
  absl::Status s = gpu->CopyDeviceToHost(dev.raw_data(), host->raw_data(), dev.TotalBytes());
  if (!s.ok()) return s;
  return host;
}

void Poison(GpuDevice* gpu, Tensor* dev) {
  const cudaError_t e = cudaMemsetAsync(dev->raw_data(), 0xFF, dev->TotalBytes(), gpu->stream());
  if (e != cudaSuccess) {
    std::fprintf(stderr, "Poison: %s\n", CudaStatus(e, "cudaMemsetAsync").ToString().c_str());
    std::abort();
  }
}

}  // namespace gpu
}  // namespace weft
