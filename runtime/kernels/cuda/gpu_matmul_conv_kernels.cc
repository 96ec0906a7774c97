// GPU MatMul, Conv2D with its backprops, MaxPool and MaxPoolGrad, on the
// skeletons the CPU kernels share (runtime/kernels/math_kernels.h,
// window_kernels.h): the same attributes, checks, errors and outputs.
//
// Matrix products run in cuBLAS (FP32, on the device's handle and stream).
// A MatMul with a compute_type of float16 or bfloat16 (mixed precision)
// rounds its operands to that type in scratch and multiplies them with
// cublasGemmEx on the tensor cores, accumulating in FP32 into its FP32
// output.
//
// Convolutions (NHWC input, HWIO filter, as on the CPU) and max pooling have
// two paths, chosen per call:
//
// - cuDNN (cudnn_conv.h), where the padding is symmetric: VALID, and SAME
//   whenever its total padding is even (stride 1 with an odd window, say).
//   Algorithms are deterministic and FP32-exact (no TF32), picked once per
//   shape; with autotuning (the default) a convolution pass whose cuDNN
//   algorithm is clearly slower than the fallback below takes the fallback.
// - Otherwise, and when cuDNN is switched off or has no acceptable
//   algorithm: TensorFlow's asymmetric SAME, which cuDNN cannot express
//   (it pads both sides equally), goes through im2col + cuBLAS and the
//   CUDA pooling kernels of conv_pool.cu, which mirror the CPU kernels
//   exactly. A 1x1, stride-1 convolution is a single GEMM either way.
//
// The switch: gpu_kernels::SetUseCudnn(bool), process-wide and read once
// per Compute, so tests and benchmarks can run both paths in one process;
// the environment variable WEFT_CUDNN=0 turns cuDNN off from the start.
//
// The fallback convolutions: an im2col launch and one GEMM, whose [K, Cout]
// filter view is the HWIO tensor itself, so no filter transpose is needed.
// The patch matrix comes from the device allocator in chunks of images of
// at most kScratchFloats.
//
//   forward:      Y[rows, Cout] = patches * F[K, Cout]
//   input grad:   dpatches      = G * F^T, gathered back per input element
//   filter grad:  dF            = sum over chunks of patches^T * G
//
// MaxPool on either path returns the CPU's values: padding never wins and
// NaN inputs are skipped. MaxPoolGrad sends each window's gradient to one
// position holding the window's maximum. The CPU and the CUDA kernel choose
// the first such position in row-major window order; cuDNN makes its own
// choice when several positions tie, so on ties the two devices may put a
// window's gradient in different places (the same total, in another
// element). With continuous inputs ties have probability ~0. In practice
// they come from a ReLU before the pool: a window of zeros whose maximum is
// 0. There the routed gradient lands on an input the ReLU clipped, and
// ReluGrad (which passes the gradient only where the ReLU input is > 0)
// zeroes it whichever position got it, so the gradient reaching the layer
// below is the same. Ties among equal positive values (duplicated or
// saturated inputs) would give a different, equally valid subgradient.
#include <algorithm>
#include <climits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/ops/window_geometry.h"
#include "runtime/kernels/cuda/cudnn_conv.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/kernel_checks.h"
#include "runtime/kernels/math_kernels.h"
#include "runtime/kernels/window_checks.h"
#include "runtime/kernels/window_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {

absl::Status RowMajorGemm(cublasHandle_t handle, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                          int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                          int64_t ldc, bool accumulate) {
  for (int64_t v : {m, n, k, lda, ldb, ldc}) {
    if (v > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("matrix dimension ", v, " is too large for cuBLAS"));
    }
  }
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const cublasStatus_t st =
      cublasSgemm(handle, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                  static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one, b, static_cast<int>(ldb), a,
                  static_cast<int>(lda), &beta, c, static_cast<int>(ldc));
  return st == CUBLAS_STATUS_SUCCESS ? absl::OkStatus() : gpu::CublasStatus(st, "cublasSgemm");
}

namespace {

using kernels::ExpectRank;
using kernels::GetAttr;

// Largest patch matrix per chunk, in floats (256 MiB).
constexpr int64_t kScratchFloats = int64_t{1} << 26;

// The product of `a` and `b` rounded to d.compute, as RowMajorGemm.
absl::Status MixedGemm(OpKernelContext* ctx, const Tensor& a, const Tensor& b, const kernels::MatMulDims& d,
                       Tensor* out) {
  for (int64_t v : {d.m, d.n, d.k, d.a1, d.b1}) {
    if (v > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("matrix dimension ", v, " is too large for cuBLAS"));
    }
  }
  // Both operands rounded into one scratch, in one launch.
  const int64_t na = a.NumElements(), nb = b.NumElements();
  const int64_t a_floats = (na + 1) / 2;  // b starts 4-byte aligned
  ASSIGN_OR_RETURN(Tensor halves, Scratch(ctx, a_floats + (nb + 1) / 2));
  void* ah = halves.raw_data();
  void* bh = halves.data<float>() + a_floats;
  WEFT_CUDA_RETURN_IF_ERROR(LaunchToHalfPair(a.data<float>(), ah, na, b.data<float>(), bh, nb,
                                             d.compute == ComputeType::kBFloat16, Stream(ctx)));
  const cudaDataType_t type = d.compute == ComputeType::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t st = cublasGemmEx(
      Gpu(ctx)->cublas(), d.tb ? CUBLAS_OP_T : CUBLAS_OP_N, d.ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(d.n),
      static_cast<int>(d.m), static_cast<int>(d.k), &one, bh, type, static_cast<int>(std::max<int64_t>(d.b1, 1)), ah,
      type, static_cast<int>(std::max<int64_t>(d.a1, 1)), &zero, out->data<float>(), CUDA_R_32F,
      static_cast<int>(d.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  return st == CUBLAS_STATUS_SUCCESS ? absl::OkStatus() : gpu::CublasStatus(st, "cublasGemmEx");
}

struct MatMul {
  static void Run(OpKernelContext* ctx, const Tensor& a, const Tensor& b, const kernels::MatMulDims& d, Tensor* out) {
    if (d.k == 0) {
      OP_REQUIRES_CUDA(ctx, cudaMemsetAsync(out->raw_data(), 0, out->TotalBytes(), Stream(ctx)),
                       "cudaMemsetAsync (MatMul with k = 0)");
      return;
    }
    if (d.compute != ComputeType::kFloat32) {
      OP_REQUIRES_OK(ctx, MixedGemm(ctx, a, b, d, out));
      return;
    }
    OP_REQUIRES_OK(ctx, RowMajorGemm(Gpu(ctx)->cublas(), d.ta, d.tb, d.m, d.n, d.k, a.data<float>(),
                                     std::max<int64_t>(d.a1, 1), b.data<float>(), std::max<int64_t>(d.b1, 1),
                                     out->data<float>(), d.n, false));
  }
};

// ---- Convolution -------------------------------------------------------------------

using kernels::ConvGeometry;
using kernels::PoolGeometry;

// The fallback kernels' view of a convolution.
WindowGeometry Window(const ConvGeometry& g) {
  WindowGeometry w;
  w.n = g.n;
  w.h = g.h;
  w.w = g.w;
  w.c = g.cin;
  w.kh = g.kh;
  w.kw = g.kw;
  w.ho = g.ho;
  w.wo = g.wo;
  w.pad_top = g.pad_top;
  w.pad_left = g.pad_left;
  w.stride = g.stride;
  return w;
}

int64_t ImagesPerChunk(const ConvGeometry& g) {
  return std::max<int64_t>(1, kScratchFloats / std::max<int64_t>(1, g.patches() * g.k()));
}

// The fallback's patch matrices, a chunk of images at a time: for each
// chunk [n0, n0 + rows / patches), im2col writes its [rows, K] patches into
// scratch and `gemm(n0, rows, patches)` consumes them.
template <typename Gemm>
absl::Status ForEachPatchChunk(OpKernelContext* ctx, const ConvGeometry& g, const float* x, Gemm gemm) {
  const WindowGeometry w = Window(g);
  const int64_t per = std::min(g.n, ImagesPerChunk(g));
  ASSIGN_OR_RETURN(Tensor scratch, Scratch(ctx, per * g.patches() * g.k()));
  for (int64_t n0 = 0; n0 < g.n; n0 += per) {
    const int64_t n1 = std::min(g.n, n0 + per);
    WEFT_CUDA_RETURN_IF_ERROR(LaunchIm2Col(w, x, n0, n1, scratch.data<float>(), Stream(ctx)));
    RETURN_IF_ERROR(gemm(n0, (n1 - n0) * g.patches(), static_cast<const float*>(scratch.data<float>())));
  }
  return absl::OkStatus();
}


// Whether this call goes to cuDNN: switched on, symmetric padding, and
// not a pointwise convolution, which is one GEMM already.
bool ForCudnn(const ConvGeometry& g) { return UseCudnn() && !g.IsPointwise() && CudnnCanConvolve(g); }

struct Conv2D {
  static void Run(OpKernelContext* ctx, const ConvGeometry& g, Tensor* out) {
    const float* x = ctx->input(0).data<float>();
    const float* f = ctx->input(1).data<float>();
    float* y = out->data<float>();
    cublasHandle_t blas = Gpu(ctx)->cublas();
    if (g.k() == 0) {
      OP_REQUIRES_CUDA(ctx, cudaMemsetAsync(y, 0, out->TotalBytes(), Stream(ctx)), "cudaMemsetAsync (Conv2D)");
      return;
    }
    if (g.IsPointwise()) {
      OP_REQUIRES_OK(ctx, RowMajorGemm(blas, false, false, g.n * g.patches(), g.cout, g.cin, x, g.cin, f, g.cout, y,
                                       g.cout, false));
      return;
    }
    auto im2col = [&]() -> absl::Status {
      return ForEachPatchChunk(ctx, g, x, [&](int64_t n0, int64_t rows, const float* patches) {
        return RowMajorGemm(blas, false, false, rows, g.cout, g.k(), patches, g.k(), f, g.cout,
                            y + n0 * g.patches() * g.cout, g.cout, false);
      });
    };
    OP_REQUIRES_OK(ctx, ForCudnn(g) ? RunConvolution(ctx, ConvPass::kForward, g, x, f, y, im2col) : im2col());
  }
};

struct Conv2DBackpropInput {
  static void Run(OpKernelContext* ctx, const ConvGeometry& g, Tensor* out) {
    float* dx = out->data<float>();
    const float* f = ctx->input(1).data<float>();
    const float* grad = ctx->input(2).data<float>();
    cublasHandle_t blas = Gpu(ctx)->cublas();
    if (g.patches() == 0 || g.cout == 0) {
      OP_REQUIRES_CUDA(ctx, cudaMemsetAsync(dx, 0, out->TotalBytes(), Stream(ctx)),
                       "cudaMemsetAsync (Conv2DBackpropInput)");
      return;
    }
    if (g.IsPointwise()) {
      OP_REQUIRES_OK(ctx, RowMajorGemm(blas, false, true, g.n * g.patches(), g.cin, g.cout, grad, g.cout, f, g.cout,
                                       dx, g.cin, false));
      return;
    }
    auto col2im = [&]() -> absl::Status {
      const WindowGeometry w = Window(g);
      const int64_t per = std::min(g.n, ImagesPerChunk(g));
      ASSIGN_OR_RETURN(Tensor scratch, Scratch(ctx, per * g.patches() * g.k()));
      for (int64_t n0 = 0; n0 < g.n; n0 += per) {
        const int64_t n1 = std::min(g.n, n0 + per);
        const int64_t rows = (n1 - n0) * g.patches();
        RETURN_IF_ERROR(RowMajorGemm(blas, false, true, rows, g.k(), g.cout, grad + n0 * g.patches() * g.cout, g.cout,
                                     f, g.cout, scratch.data<float>(), g.k(), false));
        WEFT_CUDA_RETURN_IF_ERROR(LaunchCol2Im(w, scratch.data<float>(), n0, n1, dx, Stream(ctx)));
      }
      return absl::OkStatus();
    };
    OP_REQUIRES_OK(ctx,
                   ForCudnn(g) ? RunConvolution(ctx, ConvPass::kBackpropInput, g, f, grad, dx, col2im) : col2im());
  }
};

struct Conv2DBackpropFilter {
  static void Run(OpKernelContext* ctx, const ConvGeometry& g, Tensor* out) {
    float* df = out->data<float>();
    const float* x = ctx->input(0).data<float>();
    const float* grad = ctx->input(2).data<float>();
    cublasHandle_t blas = Gpu(ctx)->cublas();
    if (g.n == 0 || g.patches() == 0) {
      OP_REQUIRES_CUDA(ctx, cudaMemsetAsync(df, 0, out->TotalBytes(), Stream(ctx)),
                       "cudaMemsetAsync (Conv2DBackpropFilter)");
      return;
    }
    if (g.IsPointwise()) {
      OP_REQUIRES_OK(ctx, RowMajorGemm(blas, true, false, g.cin, g.cout, g.n * g.patches(), x, g.cin, grad, g.cout,
                                       df, g.cout, false));
      return;
    }
    auto im2col = [&]() -> absl::Status {
      return ForEachPatchChunk(ctx, g, x, [&](int64_t n0, int64_t rows, const float* patches) {
        return RowMajorGemm(blas, true, false, g.k(), g.cout, rows, patches, g.k(), grad + n0 * g.patches() * g.cout,
                            g.cout, df, g.cout, n0 > 0);
      });
    };
    OP_REQUIRES_OK(ctx,
                   ForCudnn(g) ? RunConvolution(ctx, ConvPass::kBackpropFilter, g, x, grad, df, im2col) : im2col());
  }
};

// ---- Pooling -----------------------------------------------------------------------

// The CUDA kernels' view of a pooling window.
WindowGeometry Window(const PoolGeometry& g) {
  WindowGeometry w;
  w.n = g.n;
  w.h = g.h;
  w.w = g.w;
  w.c = g.c;
  w.kh = w.kw = g.k;
  w.ho = g.ho;
  w.wo = g.wo;
  w.pad_top = g.pad_top;
  w.pad_left = g.pad_left;
  w.stride = g.stride;
  return w;
}


struct MaxPool {
  static void Run(OpKernelContext* ctx, const PoolGeometry& g, const Tensor& x, Tensor* out) {
    if (UseCudnn() && CudnnCanPool(g)) {
      OP_REQUIRES_OK(ctx, CudnnMaxPool(ctx, g, x.data<float>(), out->data<float>()));
      return;
    }
    OP_REQUIRES_CUDA(ctx, LaunchMaxPool(Window(g), x.data<float>(), out->data<float>(), Stream(ctx)),
                     "MaxPool kernel");
  }
};

struct MaxPoolGrad {
  static void Run(OpKernelContext* ctx, const PoolGeometry& g, const Tensor& x, const Tensor& grad, Tensor* out) {
    if (UseCudnn() && CudnnCanPool(g)) {
      OP_REQUIRES_OK(ctx, CudnnMaxPoolGrad(ctx, g, x.data<float>(), grad.data<float>(), out->data<float>()));
      return;
    }
    OP_REQUIRES_CUDA(ctx,
                     LaunchMaxPoolGrad(Window(g), x.data<float>(), grad.data<float>(), out->data<float>(), Stream(ctx)),
                     "MaxPoolGrad kernel");
  }
};

// Aliases: the macro cannot take a template argument list with a comma.
using Conv2DKernel = kernels::ConvKernel<kernels::ConvOp::kForward, Conv2D>;
using Conv2DBackpropInputKernel = kernels::ConvKernel<kernels::ConvOp::kBackpropInput, Conv2DBackpropInput>;
using Conv2DBackpropFilterKernel = kernels::ConvKernel<kernels::ConvOp::kBackpropFilter, Conv2DBackpropFilter>;

WEFT_REGISTER_KERNEL("MatMul", "GPU", kernels::MatMulKernel<MatMul>);
WEFT_REGISTER_KERNEL("Conv2D", "GPU", Conv2DKernel);
WEFT_REGISTER_KERNEL("Conv2DBackpropInput", "GPU", Conv2DBackpropInputKernel);
WEFT_REGISTER_KERNEL("Conv2DBackpropFilter", "GPU", Conv2DBackpropFilterKernel);
WEFT_REGISTER_KERNEL("MaxPool", "GPU", kernels::MaxPoolKernel<MaxPool>);
WEFT_REGISTER_KERNEL("MaxPoolGrad", "GPU", kernels::MaxPoolGradKernel<MaxPoolGrad>);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
