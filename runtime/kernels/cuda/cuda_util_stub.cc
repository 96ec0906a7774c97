// cuda_util without CUDA: every call says how to get it.
#include "runtime/kernels/cuda/cuda_util.h"

namespace weft {
namespace cuda {
namespace {
absl::Status NoCuda() {
  return absl::UnimplementedError("weft was built without CUDA; rebuild with --config=cuda");
}
}  // namespace

bool BuiltWithCuda() { return false; }
absl::StatusOr<int> DeviceCount() { return NoCuda(); }
absl::StatusOr<int> ClassifyDeviceCount(int, const char*, const char*, int, bool) { return NoCuda(); }
absl::StatusOr<std::string> LibraryVersions() { return NoCuda(); }
absl::Status VectorAdd(const float*, const float*, float*, int64_t) { return NoCuda(); }

}  // namespace cuda
}  // namespace weft
