// The smallest CUDA kernel weft ships: elementwise add. It exists to prove
// the build path; the full GPU kernels come with the GPU device.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__global__ void VectorAddKernel(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    out[i] = a[i] + b[i];
  }
}

}  // namespace

// Launches on the current device and stream 0; device pointers.
cudaError_t WeftLaunchVectorAdd(const float* a, const float* b, float* out, int64_t n) {
  const int threads = 256;
  const int64_t blocks64 = (n + threads - 1) / threads;
  const int blocks = static_cast<int>(blocks64 < 4096 ? (blocks64 > 0 ? blocks64 : 1) : 4096);
  VectorAddKernel<<<blocks, threads>>>(a, b, out, n);
  return cudaGetLastError();
}
