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
// Algorithms: chosen once per (device, op, shapes, stride, padding), among
// the candidates that are deterministic (weft's sync strategies promise
// reproducible results), run in plain FP32 FMA math (CUDNN_FMA_MATH: no
// TF32 tensor cores, which would round the inputs to 10 mantissa bits) and
// need at most kMaxWorkspaceBytes of workspace. cuDNN's heuristics
// (cudnnGet*Algorithm_v7) rank them. With autotuning (the default, as in
// TensorFlow) the first three are timed once on the op's own operands: the
// fastest replaces the heuristic's first only when it is at least 1.25x
// faster, and the winner is then timed against weft's fallback
// (RunConvolution below) on the same terms, so that timing noise between
// near-equal choices cannot change a job's path from run to run. With WEFT_CUDNN_AUTOTUNE=0 the heuristic
// alone decides and cuDNN runs wherever it has an acceptable algorithm, so
// every process on the same GPU model and cuDNN version makes the same
// choice and a job's floating-point results repeat bit for bit. The
// descriptors are kept with the choice (and the pooling descriptors per
// shape), so a warm step creates none. Workspace and scratch come from the
// device's caching allocator, so a warm step makes no cudaMalloc.
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

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "runtime/kernels/window_checks.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {

// Whether the GPU window kernels use cuDNN where it applies: process-wide,
// on unless the environment variable WEFT_CUDNN is "0" when first read.
// Tests and benchmarks flip it to run both paths in one process; a kernel
// reads it once per Compute.
bool UseCudnn();
void SetUseCudnn(bool use);

// Whether a convolution's first use times cuDNN's candidates (see above):
// on unless WEFT_CUDNN_AUTOTUNE is "0" when first read. A shape keeps the
// algorithm chosen on its first use for the life of the process.
bool CudnnAutotune();
void SetCudnnAutotune(bool autotune);

// How many convolutions (any of the three passes) and poolings (MaxPool or
// MaxPoolGrad) have had their output from cuDNN in this process, so tests
// can tell which path a kernel took (timing runs are not counted).
int64_t CudnnConvolutionCount();
int64_t CudnnPoolingCount();

// Largest workspace an algorithm may ask for.
constexpr size_t kMaxWorkspaceBytes = size_t{256} << 20;

// True when cuDNN may run the convolution g: symmetric padding, every
// dimension non-zero, and tensors within cuDNN's 32-bit element counts.
bool CudnnCanConvolve(const kernels::ConvGeometry& g);

// The three passes of a convolution.
enum class ConvPass { kForward, kBackpropInput, kBackpropFilter };

// Runs pass `pass` of the convolution g, through cuDNN or through
// `fallback` (the caller's im2col + cuBLAS path, which must write every
// element of `out`), whichever this shape uses. The choice is made on the
// shape's first use and kept for the process's life: the fallback when
// cuDNN has no acceptable algorithm; with autotuning, also when the
// fallback runs at least 1.25x faster than cuDNN's chosen algorithm on
// these operands (each timed over a few runs; a 3x3 NHWC filter gradient
// on an H100 took 384 us in cuDNN 9's only deterministic FP32 algorithm
// and about 40 us in the fallback); otherwise cuDNN. The first use may run
// both paths several times; the output is the chosen path's. Pointers are
// device memory with the layouts of the op:
//   kForward:        a = x [n, h, w, cin], b = filter (HWIO), out = y [n, ho, wo, cout]
//   kBackpropInput:  a = filter, b = dy [n, ho, wo, cout], out = dx [n, h, w, cin]
//   kBackpropFilter: a = x, b = dy, out = dfilter (HWIO)
// REQUIRES: CudnnCanConvolve(g); g is not pointwise-only work the caller
// would do in one GEMM anyway.
absl::Status RunConvolution(OpKernelContext* ctx, ConvPass pass, const kernels::ConvGeometry& g, const float* a,
                            const float* b, float* out, absl::FunctionRef<absl::Status()> fallback);

// How many (shape, pass) first uses have timed cuDNN against the fallback.
int64_t ConvolutionPathTimings();

// True when cuDNN may run the pooling g (symmetric padding, non-empty,
// 32-bit element counts).
bool CudnnCanPool(const kernels::PoolGeometry& g);

// MaxPool with CUDNN_POOLING_MAX_DETERMINISTIC. Padding never wins, as on
// the CPU; NaN inputs use CUDNN_NOT_PROPAGATE_NAN, the CPU's rule that a NaN
// never becomes the maximum.
// REQUIRES: CudnnCanPool(g).
absl::Status CudnnMaxPool(OpKernelContext* ctx, const kernels::PoolGeometry& g, const float* x, float* y);
// dx of MaxPool at x for the output gradient dy. The forward output is
// recomputed from x into scratch (the op's y input is only checked for its
// shape, as on the CPU). Each window's gradient goes to one position
// holding its maximum; which one, when several tie, is cuDNN's choice (see
// gpu_matmul_conv_kernels.cc). REQUIRES: CudnnCanPool(g).
absl::Status CudnnMaxPoolGrad(OpKernelContext* ctx, const kernels::PoolGeometry& g, const float* x, const float* dy,
                              float* dx);

}  // namespace gpu_kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_CUDA_CUDNN_CONV_H_
