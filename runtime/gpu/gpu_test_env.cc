// WEFT_TEST_REQUIRE_GPUS, shared by the CUDA and the CUDA-less test helpers.
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "runtime/gpu/gpu_test_util.h"

namespace weft {
namespace gpu {

int RequiredTestGpus() {
  const char* v = std::getenv("WEFT_TEST_REQUIRE_GPUS");
  int n = 0;
  if (v == nullptr || *v == '\0') return 0;
  // Anything but a count still means "a GPU run": require one.
  if (!absl::SimpleAtoi(v, &n) || n < 1) return 1;
  return n;
}

}  // namespace gpu
}  // namespace weft
