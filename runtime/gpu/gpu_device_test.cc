// Runs on a machine with a GPU; skips elsewhere.
#include "runtime/gpu/gpu_device.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/gpu/gpu_allocator.h"
#include "runtime/gpu/gpu_test_util.h"

namespace weft {
namespace gpu {
namespace {

#define SKIP_WITHOUT_GPU(gpu) \
  if ((gpu) == nullptr) GTEST_SKIP() << "no GPU visible"

TEST(GpuStatusTest, NamesTheCall) {
  absl::Status s = CudaStatus(cudaErrorIllegalAddress, "cudaMemcpyAsync");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("cudaMemcpyAsync: an illegal memory access was encountered"), std::string::npos)
      << s;
  EXPECT_EQ(CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(CudaStatus(cudaSuccess, "x").ok());
  EXPECT_NE(CublasStatus(CUBLAS_STATUS_INVALID_VALUE, "cublasSgemm").message().find("cublasSgemm: "),
            std::string::npos);
  EXPECT_NE(CudnnStatus(CUDNN_STATUS_BAD_PARAM, "cudnnConvolutionForward").message().find("cudnnConvolutionForward: "),
            std::string::npos);
  EXPECT_NE(NcclStatus(ncclInvalidArgument, "ncclAllReduce").message().find("ncclAllReduce: "), std::string::npos);
}

absl::Status FailingCall() {
  WEFT_CUDA_RETURN_IF_ERROR(cudaErrorInvalidValue);
  return absl::OkStatus();
}

TEST(GpuStatusTest, MacroReturnsTheCallText) {
  absl::Status s = FailingCall();
  EXPECT_NE(s.message().find("cudaErrorInvalidValue: "), std::string::npos) << s;
}

// Two processes that open one GPU must report the same identity, so the
// master can keep NCCL off a GPU two tasks share.
TEST(GpuDeviceTest, SaysWhichGpuItIs) {
  GpuDevice* gpu = TestGpu();
  SKIP_WITHOUT_GPU(gpu);
  const std::string desc = gpu->physical_device_desc();
  ASSERT_EQ(desc.size(), 4u + 32u) << desc;
  EXPECT_EQ(desc.substr(0, 4), "GPU-");
  EXPECT_NE(desc.substr(4), std::string(32, '0')) << "an all-zero UUID identifies nothing";
  auto second = GpuDevice::Create("/device:GPU:0", gpu->ordinal());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->physical_device_desc(), desc);
}

TEST(GpuDeviceTest, RoundTripThroughTheDevice) {
  GpuDevice* gpu = TestGpu();
  SKIP_WITHOUT_GPU(gpu);
  EXPECT_EQ(gpu->device_type(), "GPU");
  EXPECT_FALSE(gpu->allocator()->on_host());
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i);
  Tensor host = *Tensor::FromVector<float>({10, 100}, values);
  absl::StatusOr<Tensor> dev = ToDevice(gpu, host);
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_FALSE(dev->on_host());
  EXPECT_EQ(dev->DebugString(), "float32[10,100] {on device}");
  absl::StatusOr<Tensor> back = ToHost(gpu, *dev);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->on_host());
  EXPECT_EQ(std::memcmp(back->raw_data(), host.raw_data(), host.TotalBytes()), 0);
}

TEST(GpuDeviceTest, PoisonFillsWithNaN) {
  GpuDevice* gpu = TestGpu();
  SKIP_WITHOUT_GPU(gpu);
  Tensor dev(DType::kFloat32, TensorShape{33}, gpu->allocator());
  Poison(gpu, &dev);
  absl::StatusOr<Tensor> back = ToHost(gpu, dev);
  ASSERT_TRUE(back.ok()) << back.status();
  for (float f : back->flat<float>()) EXPECT_TRUE(std::isnan(f));
}

TEST(GpuDeviceTest, CopiesAreOrderedAgainstTheComputeStream) {
  GpuDevice* gpu = TestGpu();
  SKIP_WITHOUT_GPU(gpu);
  // Work on the compute stream, then a host->device copy into the same
  // buffer, then device->host: the copy must land after the memset and the
  // read after the copy, without any explicit sync in between.
  const size_t n = size_t{8} << 20;
  Tensor dev(DType::kFloat32, TensorShape{static_cast<int64_t>(n)}, gpu->allocator());
  ASSERT_EQ(cudaMemsetAsync(dev.raw_data(), 0, n * sizeof(float), gpu->stream()), cudaSuccess);
  std::vector<float> ones(n, 1.0f);
  ASSERT_TRUE(gpu->CopyHostToDevice(ones.data(), dev.raw_data(), n * sizeof(float)).ok());
  std::vector<float> out(n, -1.0f);
  ASSERT_TRUE(gpu->CopyDeviceToHost(dev.raw_data(), out.data(), n * sizeof(float)).ok());
  EXPECT_EQ(out.front(), 1.0f);
  EXPECT_EQ(out.back(), 1.0f);
}

TEST(GpuAllocatorTest, WarmStepsCallNoCudaMalloc) {
  GpuDevice* gpu = TestGpu();
  SKIP_WITHOUT_GPU(gpu);
  auto step = [&] {
    std::vector<Tensor> live;
    for (int64_t n : {64 * 784, 784 * 128, 128, 64 * 128, 64 * 10, 1}) {
      live.emplace_back(DType::kFloat32, TensorShape{n}, gpu->allocator());
    }
  };
  step();
  const Allocator::Stats warm = gpu->allocator()->GetStats();
  for (int i = 0; i < 10; ++i) step();
  const Allocator::Stats after = gpu->allocator()->GetStats();
  EXPECT_EQ(after.system_allocs, warm.system_allocs);
  EXPECT_GE(after.cache_hits, warm.cache_hits + 60);
  EXPECT_GT(after.bytes_cached, 0);
}

TEST(GpuAllocatorTest, BlockUsedOnAnotherStreamWaitsForIt) {
  GpuDevice* gpu = TestGpu();
  SKIP_WITHOUT_GPU(gpu);
  GpuAllocator* alloc = gpu->gpu_allocator();
  cudaStream_t side;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  const size_t bytes = size_t{3} << 20;  // a size class no other test uses
  void* first = nullptr;
  {
    Tensor t(DType::kFloat32, TensorShape{static_cast<int64_t>(bytes / 4)}, alloc);
    first = t.raw_data();
    // Keep the side stream busy with the block, then release it on the host.
    for (int i = 0; i < 50; ++i) ASSERT_EQ(cudaMemsetAsync(first, i, bytes, side), cudaSuccess);
    alloc->RecordStream(first, side);
  }
  // While the side stream may still write, the block must not come back.
  Tensor second(DType::kFloat32, TensorShape{static_cast<int64_t>(bytes / 4)}, alloc);
  const bool reused_early = second.raw_data() == first && cudaStreamQuery(side) == cudaErrorNotReady;
  EXPECT_FALSE(reused_early);
  ASSERT_EQ(cudaStreamSynchronize(side), cudaSuccess);
  // Once the side stream is done, the block is reusable.
  Tensor third(DType::kFloat32, TensorShape{static_cast<int64_t>(bytes / 4)}, alloc);
  EXPECT_TRUE(third.raw_data() == first || second.raw_data() == first);
  cudaStreamDestroy(side);
}

TEST(GpuAllocatorTest, PinnedMemoryIsHostMemoryAndCached) {
  GpuDevice* gpu = TestGpu();
  SKIP_WITHOUT_GPU(gpu);
  Allocator* pinned = gpu->pinned_allocator();
  EXPECT_TRUE(pinned->on_host());
  { Tensor t(DType::kFloat32, TensorShape{4096}, pinned); t.data<float>()[4095] = 1.0f; }
  const int64_t allocs = pinned->GetStats().system_allocs;
  { Tensor t(DType::kFloat32, TensorShape{4096}, pinned); }
  EXPECT_EQ(pinned->GetStats().system_allocs, allocs);
}

}  // namespace
}  // namespace gpu
}  // namespace weft
