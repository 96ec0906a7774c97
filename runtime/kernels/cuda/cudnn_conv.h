// Conv2D, its backprops, MaxPool and MaxPoolGrad through cuDNN's legacy
// API, for the GPU kernels in gpu_matmul_conv_kernels.cc, which fall back
// to their own im2col + cuBLAS and CUDA pooling kernels wherever these
// functions do not apply.
//
// cuDNN pads symmetrically, so it is used only where TensorFlow's padding
// (graph/ops/window_geometry.h) is symmetric: VALID, and the SAME cases
// whose total padding is even. Tensors are NHWC (CUDNN_TENSOR_NHWC). cuDNN's
// NHWC filter layout is KRSC = OHWI while weft's is HWIO, so the filter is
// transposed into scratch for the forward and input-gradient passes, and
// the filter gradient is computed as OHWI in scratch and transposed back.
//
// Algorithms: chosen once per (device, op, shapes, stride, padding) with
// cuDNN's heuristics (cudnnGet*Algorithm_v7), not by timing them
// (cudnnFind*), so every process on the same GPU model and cuDNN version
// picks the same one and a job's results are reproducible from run to run.
// The first candidate is taken that is deterministic (weft's sync
// strategies promise reproducible results), runs in plain FP32 FMA math
// (CUDNN_FMA_MATH: no TF32 tensor cores, which would round the inputs to
// 10 mantissa bits) and needs at most kMaxWorkspaceBytes of workspace. A
// shape with no such algorithm keeps the fallback path. The descriptors
// are kept with the choice (and the pooling descriptors per shape), so a
// warm step creates none. Workspace and scratch come from the device's
// caching allocator, so a warm step makes no cudaMalloc.
//
// The handle is the device's (GpuDevice::cudnn(), bound to its compute
// stream); the executor runs one kernel of a device at a time, so no
// locking is needed around it. Every cuDNN and CUDA failure becomes a
// status naming the call.
//
// Thread-safety: thread-safe (the algorithm cache has its own lock); calls
// for one device must not overlap (see above).
#ifndef WEFT_RUNTIME_KERNELS_CUDA_CUDNN_CONV_H_
#define WEFT_RUNTIME_KERNELS_CUDA_CUDNN_CONV_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "runtime/kernels/cpu/window_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {

// Whether the GPU window kernels use cuDNN where it applies: process-wide,
// on unless the environment variable WEFT_CUDNN is "0" when first read.
// Tests and benchmarks flip it to run both paths in one process; a kernel
// reads it once per Compute.
bool UseCudnn();
void SetUseCudnn(bool use);

// How many convolutions (any of the three passes) and poolings (MaxPool or
// MaxPoolGrad) cuDNN has run in this process, so tests can tell which path
// a kernel took.
int64_t CudnnConvolutionCount();
int64_t CudnnPoolingCount();

// Largest workspace an algorithm may ask for.
constexpr size_t kMaxWorkspaceBytes = size_t{256} << 20;

// True when cuDNN may run the convolution g: symmetric padding, every
// dimension non-zero, and tensors within cuDNN's 32-bit element counts.
bool CudnnCanConvolve(const cpu::ConvGeometry& g);

// Each returns false, having enqueued nothing, when cuDNN has no acceptable
// algorithm for g (the caller then takes its fallback path), and true once
// the work is enqueued on the device's stream. Pointers are device memory
// with the layouts of the op: x and dx [n, h, w, cin], filter and dfilter
// HWIO, y and dy [n, ho, wo, cout]. REQUIRES: CudnnCanConvolve(g).
absl::StatusOr<bool> CudnnConv2D(OpKernelContext* ctx, const cpu::ConvGeometry& g, const float* x,
                                 const float* filter, float* y);
absl::StatusOr<bool> CudnnConv2DBackpropInput(OpKernelContext* ctx, const cpu::ConvGeometry& g,
                                              const float* filter, const float* dy, float* dx);
absl::StatusOr<bool> CudnnConv2DBackpropFilter(OpKernelContext* ctx, const cpu::ConvGeometry& g, const float* x,
                                               const float* dy, float* dfilter);

// True when cuDNN may run the pooling g (symmetric padding, non-empty,
// 32-bit element counts).
bool CudnnCanPool(const cpu::PoolGeometry& g);

// MaxPool with CUDNN_POOLING_MAX_DETERMINISTIC. Padding never wins, as on
// the CPU; NaN inputs use CUDNN_NOT_PROPAGATE_NAN, the CPU's rule that a NaN
// never becomes the maximum.
// REQUIRES: CudnnCanPool(g).
absl::Status CudnnMaxPool(OpKernelContext* ctx, const cpu::PoolGeometry& g, const float* x, float* y);
// dx of MaxPool at x for the output gradient dy. The forward output is
// recomputed from x into scratch (the op's y input is only checked for its
// shape, as on the CPU). Each window's gradient goes to one position
// holding its maximum; which one, when several tie, is cuDNN's choice (see
// gpu_matmul_conv_kernels.cc). REQUIRES: CudnnCanPool(g).
absl::Status CudnnMaxPoolGrad(OpKernelContext* ctx, const cpu::PoolGeometry& g, const float* x, const float* dy,
                              float* dx);

}  // namespace gpu_kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_CUDA_CUDNN_CONV_H_
