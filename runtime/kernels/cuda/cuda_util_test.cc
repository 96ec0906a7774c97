#include "runtime/kernels/cuda/cuda_util.h"

#include <cstdio>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace cuda {
namespace {

TEST(CudaTest, VectorAddOnGpu) {
  auto count = DeviceCount();
  if (!count.ok() || *count == 0) {
    GTEST_SKIP() << "no GPU: " << (count.ok() ? "0 devices" : std::string(count.status().message()));
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

TEST(CudaTest, ReportsWhyThereIsNoGpu) {
  auto count = DeviceCount();
  if (count.ok()) GTEST_SKIP() << "CUDA runtime answers: " << *count << " device(s)";
  // Without a GPU or toolkit, the error must say what is missing, not crash.
  EXPECT_FALSE(count.status().message().empty());
  std::vector<float> a(4, 1.0f), out(4);
  EXPECT_FALSE(VectorAdd(a.data(), a.data(), out.data(), 4).ok());
}

}  // namespace
}  // namespace cuda
}  // namespace weft
