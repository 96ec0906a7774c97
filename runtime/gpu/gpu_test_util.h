// Helpers for tests of GPU code: a process-wide test GPU and copies between
// host tensors and device tensors.
//
// TestGpu() is nullptr when the binary was built without CUDA or no GPU is
// visible, so a GPU test starts with
//   gpu::GpuDevice* gpu = gpu::TestGpu();
//   if (gpu == nullptr) GTEST_SKIP() << "no GPU";
// and runs for real on a machine with one.
//
// Thread-safety: thread-safe.
#ifndef WEFT_RUNTIME_GPU_GPU_TEST_UTIL_H_
#define WEFT_RUNTIME_GPU_GPU_TEST_UTIL_H_

#include "absl/status/statusor.h"
#include "common/tensor.h"

namespace weft {
namespace gpu {

class GpuDevice;

// GPU 0, created on first use and never destroyed; nullptr without one.
GpuDevice* TestGpu();
// A device tensor with `host`'s dtype, shape and contents (synchronised:
// the copy is on the device when this returns).
absl::StatusOr<Tensor> ToDevice(GpuDevice* gpu, const Tensor& host);
// A host tensor with `dev`'s contents, after every earlier kernel on the
// device's stream has finished (errors those kernels hit surface here).
absl::StatusOr<Tensor> ToHost(GpuDevice* gpu, const Tensor& dev);
// Fills a device tensor with 0xFF bytes (NaN for floats, -1 for integers),
// so a kernel that leaves part of its output unwritten fails its test.
void Poison(GpuDevice* gpu, Tensor* dev);

}  // namespace gpu
}  // namespace weft

#endif  // WEFT_RUNTIME_GPU_GPU_TEST_UTIL_H_
