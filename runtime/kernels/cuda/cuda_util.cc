#include "runtime/kernels/cuda/cuda_util.h"

#include <cublas_api.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <dlfcn.h>
#include <library_types.h>
#include <nccl.h>
#include <unistd.h>

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

namespace {

// Whether the machine has an NVIDIA driver: its kernel module's files or its
// user-space library. Without either, there is no GPU to use.
bool DriverInstalled() {
  if (::access("/proc/driver/nvidia/version", F_OK) == 0 || ::access("/dev/nvidiactl", F_OK) == 0) return true;
  void* lib = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) return false;
  ::dlclose(lib);
  return true;
}

}  // namespace

absl::StatusOr<int> ClassifyDeviceCount(int error, const char* name, const char* text, int count,
                                        bool driver_installed) {
  if (error == cudaSuccess) return count;
  if (error == cudaErrorNoDevice) return 0;
  if (!driver_installed && error == cudaErrorInsufficientDriver) return 0;
  return absl::UnavailableError(absl::StrCat("cudaGetDeviceCount: ", name, ": ", text,
                                             driver_installed ? " (an NVIDIA driver is installed)" : ""));
}

absl::StatusOr<int> DeviceCount() {
  static const absl::StatusOr<int> count = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) cudaGetLastError();  // clear the sticky error for later calls
    return ClassifyDeviceCount(e, cudaGetErrorName(e), cudaGetErrorString(e), n, e != cudaSuccess && DriverInstalled());
  }();
  return count;
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
