#include "runtime/kernels/cuda/cuda_util.h"

#include <cublas_api.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <library_types.h>
#include <nccl.h>

#include "absl/strings/str_cat.h"

cudaError_t WeftLaunchVectorAdd(const float* a, const float* b, float* out, int64_t n);

namespace weft {
namespace cuda {
namespace {

absl::Status FromCuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

// Frees device memory when it leaves scope.
struct DeviceBuffer {
  float* ptr = nullptr;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

}  // namespace

bool BuiltWithCuda() { return true; }

absl::StatusOr<int> DeviceCount() {
  int n = 0;
  absl::Status s = FromCuda(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (!s.ok()) return s;
  return n;
}

absl::StatusOr<std::string> LibraryVersions() {
  int runtime = 0;
  absl::Status s = FromCuda(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  if (!s.ok()) return s;
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS) {
    return absl::UnavailableError("cublasGetProperty failed");
  }
  int nccl = 0;
  if (ncclGetVersion(&nccl) != ncclSuccess) return absl::UnavailableError("ncclGetVersion failed");
  return absl::StrCat("CUDA runtime ", runtime, ", cuBLAS ", major, ".", minor, ".", patch, ", cuDNN ",
                      cudnnGetVersion(), ", NCCL ", nccl);
}

absl::Status VectorAdd(const float* a, const float* b, float* out, int64_t n) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  DeviceBuffer da, db, dout;
  absl::Status s = FromCuda(cudaMalloc(&da.ptr, bytes), "cudaMalloc");
  if (s.ok()) s = FromCuda(cudaMalloc(&db.ptr, bytes), "cudaMalloc");
  if (s.ok()) s = FromCuda(cudaMalloc(&dout.ptr, bytes), "cudaMalloc");
  if (s.ok()) s = FromCuda(cudaMemcpy(da.ptr, a, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  if (s.ok()) s = FromCuda(cudaMemcpy(db.ptr, b, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  if (s.ok()) s = FromCuda(WeftLaunchVectorAdd(da.ptr, db.ptr, dout.ptr, n), "VectorAdd launch");
  if (s.ok()) s = FromCuda(cudaMemcpy(out, dout.ptr, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  return s;
}

}  // namespace cuda
}  // namespace weft
