#include "runtime/kernels/cuda/cuda_util.h"

#include <cstdio>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/gpu/gpu_test_util.h"

namespace weft {
namespace cuda {
namespace {

TEST(CudaTest, VectorAddOnGpu) {
  if (!BuiltWithCuda()) GTEST_SKIP() << "built without --config=cuda";
  auto count = DeviceCount();
  ASSERT_TRUE(count.ok()) << count.status();  // a broken driver fails; only "no GPU" skips
  if (*count == 0) {
    ASSERT_EQ(gpu::RequiredTestGpus(), 0) << "WEFT_TEST_REQUIRE_GPUS is set, but no GPU is present";
    GTEST_SKIP() << "no GPU present";
  }
  const int64_t n = 1 << 20;
  std::vector<float> a(n), b(n), out(n, -1.0f);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 0.5f * static_cast<float>(i % 97);
  }
  ASSERT_TRUE(VectorAdd(a.data(), b.data(), out.data(), n).ok());
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(out[i], a[i] + b[i]) << i;
}

TEST(CudaTest, LinkedLibrariesAnswer) {
  if (!BuiltWithCuda()) {
    EXPECT_EQ(LibraryVersions().status().code(), absl::StatusCode::kUnimplemented);
    GTEST_SKIP() << "built without --config=cuda";
  }
  auto v = LibraryVersions();
  ASSERT_TRUE(v.ok()) << v.status();
  for (const char* lib : {"CUDA runtime", "cuBLAS", "cuDNN", "NCCL"}) {
    EXPECT_NE(v->find(lib), std::string::npos) << *v;
  }
  EXPECT_EQ(v->find(" 0"), std::string::npos) << "a library reported version 0: " << *v;
  std::printf("%s\n", v->c_str());
}

// cudaError_t values (stable across CUDA releases): this test needs no CUDA
// headers, so it builds in either configuration.
constexpr int kCudaSuccess = 0;
constexpr int kCudaErrorInitializationError = 3;
constexpr int kCudaErrorInsufficientDriver = 35;
constexpr int kCudaErrorNoDevice = 100;

TEST(CudaTest, OnlyAMissingGpuCountsAsNone) {
  if (!BuiltWithCuda()) GTEST_SKIP() << "built without --config=cuda";
  EXPECT_EQ(*ClassifyDeviceCount(kCudaSuccess, "cudaSuccess", "no error", 2, true), 2);
  EXPECT_EQ(*ClassifyDeviceCount(kCudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device", 0, true), 0);
  // No driver on the machine at all: no GPU.
  EXPECT_EQ(*ClassifyDeviceCount(kCudaErrorInsufficientDriver, "cudaErrorInsufficientDriver", "too old", 0, false), 0);
  // A driver that is there but too old, or any other error: broken, with
  // CUDA's own words.
  auto old = ClassifyDeviceCount(kCudaErrorInsufficientDriver, "cudaErrorInsufficientDriver", "too old", 0, true);
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(old.status().message().find("cudaErrorInsufficientDriver: too old"), std::string::npos) << old.status();
  auto init = ClassifyDeviceCount(kCudaErrorInitializationError, "cudaErrorInitializationError", "init", 0, false);
  EXPECT_FALSE(init.ok());
}

TEST(CudaTest, NoGpuMeansZeroAndKernelsSayWhy) {
  auto count = DeviceCount();
  if (!BuiltWithCuda()) {
    EXPECT_EQ(count.status().code(), absl::StatusCode::kUnimplemented);
    GTEST_SKIP() << "built without --config=cuda";
  }
  ASSERT_TRUE(count.ok()) << count.status();
  if (*count > 0) GTEST_SKIP() << "this machine has " << *count << " GPU(s)";
  // Without a GPU, a kernel launch is an error that says so, not a crash.
  std::vector<float> a(4, 1.0f), out(4);
  absl::Status s = VectorAdd(a.data(), a.data(), out.data(), 4);
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(s.message().empty());
}

}  // namespace
}  // namespace cuda
}  // namespace weft
