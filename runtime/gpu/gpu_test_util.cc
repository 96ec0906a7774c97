#include "runtime/gpu/gpu_test_util.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/gpu/gpu_device.h"
#include "runtime/gpu/gpu_devices.h"

namespace weft {
namespace gpu {

namespace {

// GPU 0 or why there is none: nullptr with OK when no GPU is present, the
// CUDA error when there is one that cannot be used.
struct TestGpuState {
  GpuDevice* gpu = nullptr;
  absl::Status error;
};

const TestGpuState& State() {
  static const TestGpuState* const state = [] {
    auto* st = new TestGpuState;
    absl::StatusOr<int> count = GpuCount();
    if (!count.ok()) {
      st->error = count.status();
    } else if (*count > 0) {
      absl::StatusOr<std::unique_ptr<GpuDevice>> d = GpuDevice::Create("/device:GPU:0", 0);
      if (d.ok()) {
        st->gpu = d->release();  // never destroyed: tests' static tensors may outlive main
      } else {
        st->error = d.status();
      }
    }
    return st;
  }();
  return *state;
}

}  // namespace

GpuDevice* TestGpu() {
  const TestGpuState& st = State();
  if (!st.error.ok()) {
    ADD_FAILURE() << "CUDA is present but broken, so this GPU test fails rather than skips: " << st.error;
  } else if (st.gpu == nullptr && RequiredTestGpus() > 0) {
    ADD_FAILURE() << "no GPU is present, but WEFT_TEST_REQUIRE_GPUS=" << RequiredTestGpus() << " requires one";
  }
  return st.gpu;
}

bool TestHasGpus(int n) {
  if (TestGpu() == nullptr) return false;
  absl::StatusOr<int> count = GpuCount();
  if (count.ok() && *count >= n) return true;
  if (!count.ok()) {
    ADD_FAILURE() << count.status();
  } else if (RequiredTestGpus() >= n) {
    ADD_FAILURE() << *count << " GPU(s) visible, but WEFT_TEST_REQUIRE_GPUS=" << RequiredTestGpus() << " requires "
                  << n;
  }
  return false;
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
