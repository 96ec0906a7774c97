// The one case of a GPU test target built without --config=cuda: it says so
// as a skip, where an empty target would pass with no cases, and fails in a
// run that requires GPUs.
#include "gtest/gtest.h"
#include "runtime/gpu/gpu_test_util.h"

namespace weft {
namespace gpu {
namespace {

TEST(BuiltWithoutCuda, GpuCasesNotCompiled) {
  if (RequiredTestGpus() > 0) {
    FAIL() << "this target was built without CUDA, but WEFT_TEST_REQUIRE_GPUS=" << RequiredTestGpus()
           << " requires its GPU cases; build with --config=cuda";
  }
  GTEST_SKIP() << "built without CUDA: its GPU cases need --config=cuda";
}

}  // namespace
}  // namespace gpu
}  // namespace weft
