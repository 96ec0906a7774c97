// CUDA plumbing: device discovery, status conversion and one small kernel
// that proves the nvcc -> Bazel -> binary path.
//
// Built with --config=cuda these call the CUDA runtime; without it they return
// UNIMPLEMENTED, so callers and tests behave the same on machines with no
// toolkit or no GPU.
//
// Thread-safety: thread-safe (the CUDA runtime is).
#ifndef WEFT_RUNTIME_KERNELS_CUDA_CUDA_UTIL_H_
#define WEFT_RUNTIME_KERNELS_CUDA_CUDA_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace weft {
namespace cuda {

// True when this binary was built with CUDA support.
bool BuiltWithCuda();
// Number of visible GPUs. 0 when no GPU is present: the runtime reports no
// device, or finds no NVIDIA driver on the machine at all. Any other CUDA
// error (a driver that is installed but broken or too old, a device that
// fails to initialise) is UNAVAILABLE with the runtime's message, so that a
// broken GPU machine is never mistaken for one without a GPU. The answer of
// the first call is kept (CUDA's own is).
absl::StatusOr<int> DeviceCount();
// The rule DeviceCount applies, apart from the CUDA call so it can be tested
// on any machine: `error` is cudaGetDeviceCount's cudaError_t, `name` and
// `text` its name and description, `driver_installed` whether the machine
// has an NVIDIA kernel driver or libcuda.
absl::StatusOr<int> ClassifyDeviceCount(int error, const char* name, const char* text, int count,
                                        bool driver_installed);
// "CUDA runtime 13000, cuBLAS 13.0.0, cuDNN 91300, NCCL 22800": asks each
// library linked under --config=cuda for its version (no GPU needed), so a
// broken link or a missing library shows here rather than in a later issue.
absl::StatusOr<std::string> LibraryVersions();
// out[i] = a[i] + b[i] on GPU 0, for host arrays of n floats.
absl::Status VectorAdd(const float* a, const float* b, float* out, int64_t n);

}  // namespace cuda
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_CUDA_CUDA_UTIL_H_
