// Built without CUDA: no test GPU, so GPU tests skip.
#include "runtime/gpu/gpu_test_util.h"

namespace weft {
namespace gpu {

GpuDevice* TestGpu() { return nullptr; }
absl::StatusOr<Tensor> ToDevice(GpuDevice*, const Tensor&) {
  return absl::UnimplementedError("built without CUDA");
}
absl::StatusOr<Tensor> ToHost(GpuDevice*, const Tensor&) { return absl::UnimplementedError("built without CUDA"); }
void Poison(GpuDevice*, Tensor*) {}

}  // namespace gpu
}  // namespace weft
