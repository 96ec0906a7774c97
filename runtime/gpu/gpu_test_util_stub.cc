// Built without CUDA: no test GPU, so GPU tests skip (or fail, in a run that
// requires GPUs).
#include "runtime/gpu/gpu_test_util.h"

#include "gtest/gtest.h"

namespace weft {
namespace gpu {

GpuDevice* TestGpu() {
  if (RequiredTestGpus() > 0) {
    ADD_FAILURE() << "built without CUDA, but WEFT_TEST_REQUIRE_GPUS=" << RequiredTestGpus() << " requires a GPU";
  }
  return nullptr;
}
bool TestHasGpus(int) { return TestGpu() != nullptr; }
absl::StatusOr<Tensor> ToDevice(GpuDevice*, const Tensor&) {
  return absl::UnimplementedError("built without CUDA");
}
absl::StatusOr<Tensor> ToHost(GpuDevice*, const Tensor&) { return absl::UnimplementedError("built without CUDA"); }
void Poison(GpuDevice*, Tensor*) {}

}  // namespace gpu
}  // namespace weft
