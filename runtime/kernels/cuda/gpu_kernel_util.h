// Helpers shared by the GPU OpKernels (gpu_*_kernels.cc): the device behind a
// context, CUDA/cuBLAS results turned into a kernel's status with the failing
// call named, scratch memory from the device's allocator, and the row-major
// GEMM every matrix product here goes through.
//
// A GPU kernel's Compute checks shapes on the host (shapes are host data),
// enqueues its work on the device's stream and returns; it never waits for
// the device and never reads device memory on the host.
#ifndef WEFT_RUNTIME_KERNELS_CUDA_GPU_KERNEL_UTIL_H_
#define WEFT_RUNTIME_KERNELS_CUDA_GPU_KERNEL_UTIL_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "runtime/gpu/gpu_device.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {

inline gpu::GpuDevice* Gpu(OpKernelContext* ctx) { return static_cast<gpu::GpuDevice*>(ctx->device()); }
inline gpu::GpuDevice* Gpu(OpKernelConstruction* c) { return static_cast<gpu::GpuDevice*>(c->device()); }
inline cudaStream_t Stream(OpKernelContext* ctx) { return Gpu(ctx)->stream(); }

// Sets ctx's status from a launcher's result and returns from Compute when
// it failed: OP_REQUIRES_CUDA(ctx, LaunchRelu(...), "Relu kernel").
#define OP_REQUIRES_CUDA(ctx, expr, what)                      \
  do {                                                         \
    cudaError_t weft_err_ = (expr);                            \
    if (weft_err_ != cudaSuccess) {                            \
      (ctx)->SetStatus(::weft::gpu::CudaStatus(weft_err_, what)); \
      return;                                                  \
    }                                                          \
  } while (0)

#define OP_REQUIRES_CUBLAS(ctx, expr, what)                        \
  do {                                                             \
    cublasStatus_t weft_st_ = (expr);                              \
    if (weft_st_ != CUBLAS_STATUS_SUCCESS) {                       \
      (ctx)->SetStatus(::weft::gpu::CublasStatus(weft_st_, what)); \
      return;                                                      \
    }                                                              \
  } while (0)

// Device memory for `floats` floats that returns to the device's caching
// allocator when the tensor goes. The allocator is stream-ordered, so the
// block may be released while work queued on the stream still uses it.
// Through allocate_temp, which never throws: the size follows a request's
// shapes, and running out of device memory is RESOURCE_EXHAUSTED naming the
// node.
inline absl::StatusOr<Tensor> Scratch(OpKernelContext* ctx, int64_t floats) {
  return ctx->allocate_temp(DType::kFloat32, TensorShape{floats < 1 ? 1 : floats});
}

// `floats` floats of scratch in *holder, at *p (null when floats is 0, as
// for a batch small enough to need no partial sums). False, with ctx's
// status set, when the allocator refuses.
inline bool OptionalScratch(OpKernelContext* ctx, int64_t floats, Tensor* holder, float** p) {
  *p = nullptr;
  if (floats == 0) return true;
  absl::StatusOr<Tensor> t = Scratch(ctx, floats);
  if (!t.ok()) {
    ctx->SetStatus(t.status());
    return false;
  }
  *holder = *std::move(t);
  *p = holder->data<float>();
  return true;
}

// A writable pointer to input i, which an update kernel writes in place (a
// variable's own buffer).
inline float* MutableInput(OpKernelContext* ctx, int i) {
  return static_cast<float*>(const_cast<void*>(ctx->input(i).raw_data()));
}

// C[m, n] = op(A) op(B) (+ C when accumulate) for row-major matrices with
// leading dimensions lda, ldb, ldc (row lengths as stored). cuBLAS is
// column-major, so this computes C^T = op(B)^T op(A)^T with the operands
// swapped.
absl::Status RowMajorGemm(cublasHandle_t handle, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                          int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                          int64_t ldc, bool accumulate);

}  // namespace gpu_kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_CUDA_GPU_KERNEL_UTIL_H_
