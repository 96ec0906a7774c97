// Helpers for tests of GPU code: a process-wide test GPU and copies between
// host tensors and device tensors.
//
// A GPU test starts with
//   gpu::GpuDevice* gpu = gpu::TestGpu();
//   if (gpu == nullptr) GTEST_SKIP() << "no GPU";
// and runs for real on a machine with one. It skips only where no GPU is
// present: on a machine whose driver is broken, or whose GPU fails to open,
// TestGpu() records a failure with CUDA's message before returning nullptr,
// so the skip becomes a failure. And with WEFT_TEST_REQUIRE_GPUS=N in the
// environment (bench/gpu.sh --run sets it to the machine's GPU count) a test
// that would skip for want of N or fewer GPUs fails instead: a GPU run
// cannot pass by skipping.
//
// Thread-safety: thread-safe.
#ifndef WEFT_RUNTIME_GPU_GPU_TEST_UTIL_H_
#define WEFT_RUNTIME_GPU_GPU_TEST_UTIL_H_

#include "absl/status/statusor.h"
#include "common/tensor.h"

namespace weft {
namespace gpu {

class GpuDevice;

// WEFT_TEST_REQUIRE_GPUS, or 0 when it is unset.
int RequiredTestGpus();
// GPU 0, created on first use and never destroyed; nullptr without one (a
// gtest failure is recorded where that must not pass as a skip, above).
GpuDevice* TestGpu();
// Whether at least `n` GPUs are visible; false, with a failure recorded
// where that must not pass as a skip, when not.
bool TestHasGpus(int n);
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
