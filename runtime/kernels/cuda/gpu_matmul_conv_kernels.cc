// GPU MatMul, Conv2D with its backprops, MaxPool and MaxPoolGrad.
//
// Matrix products run in cuBLAS (FP32, on the device's handle and stream).
// The convolutions mirror the CPU kernels (runtime/kernels/cpu/conv_kernels.cc:
// NHWC input, HWIO filter): an im2col launch and one GEMM, whose [K, Cout]
// filter view is the HWIO tensor itself, so no filter transpose is needed and
// every padding the CPU accepts (TensorFlow's asymmetric SAME included) is
// handled the same way. The patch matrix comes from the device allocator in
// chunks of images of at most kScratchFloats.
//
//   forward:      Y[rows, Cout] = patches * F[K, Cout]
//   input grad:   dpatches      = G * F^T, gathered back per input element
//   filter grad:  dF            = sum over chunks of patches^T * G
//
// MaxPool(Grad) are plain CUDA kernels (conv_pool.cu): cuDNN's pooling pads
// symmetrically and routes a tied maximum's gradient its own way, while the
// CPU kernel pads TensorFlow's way and routes to the first maximum.
#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "graph/ops/window_geometry.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
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

using cpu::ExpectRank;
using cpu::GetAttr;

// Largest patch matrix per chunk, in floats (256 MiB).
constexpr int64_t kScratchFloats = int64_t{1} << 26;

class MatMulOp : public OpKernel {
 public:
  explicit MatMulOp(OpKernelConstruction* c) : OpKernel(c) {
    if (!GetAttr(c, GetBoolAttrOr(c->def(), "transpose_a", false), &ta_)) return;
    GetAttr(c, GetBoolAttrOr(c->def(), "transpose_b", false), &tb_);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    OP_REQUIRES_OK(ctx, ExpectRank(a, 2, "a"));
    OP_REQUIRES_OK(ctx, ExpectRank(b, 2, "b"));
    const int64_t a0 = a.shape().dim(0), a1 = a.shape().dim(1);
    const int64_t b0 = b.shape().dim(0), b1 = b.shape().dim(1);
    const int64_t m = ta_ ? a1 : a0, k = ta_ ? a0 : a1;
    const int64_t kb = tb_ ? b1 : b0, n = tb_ ? b0 : b1;
    OP_REQUIRES(ctx, k == kb,
                absl::InvalidArgumentError(absl::StrCat("inner dimensions differ: ", a.shape().DebugString(),
                                                        ta_ ? "^T" : "", " x ", b.shape().DebugString(),
                                                        tb_ ? "^T" : "")));
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, TensorShape{m, n});
    if (out == nullptr || m == 0 || n == 0) return;
    if (k == 0) {
      OP_REQUIRES_CUDA(ctx, cudaMemsetAsync(out->raw_data(), 0, out->TotalBytes(), Stream(ctx)),
                       "cudaMemsetAsync (MatMul with k = 0)");
      return;
    }
    OP_REQUIRES_OK(ctx, RowMajorGemm(Gpu(ctx)->cublas(), ta_, tb_, m, n, k, a.data<float>(), std::max<int64_t>(a1, 1),
                                     b.data<float>(), std::max<int64_t>(b1, 1), out->data<float>(), n, false));
  }

 private:
  bool ta_ = false;
  bool tb_ = false;
};

// ---- Convolution -------------------------------------------------------------------

struct ConvGeometry {
  WindowGeometry w;  // c: input channels
  int64_t cout;
  int64_t k() const { return w.kh * w.kw * w.c; }
  int64_t patches() const { return w.ho * w.wo; }
  bool IsPointwise() const {
    return w.kh == 1 && w.kw == 1 && w.stride == 1 && w.pad_top == 0 && w.pad_left == 0;
  }
  TensorShape OutputShape() const { return TensorShape{w.n, w.ho, w.wo, cout}; }
  int64_t ImagesPerChunk() const {
    return std::max<int64_t>(1, kScratchFloats / std::max<int64_t>(1, patches() * k()));
  }
};

// The CPU's geometry and messages (conv_kernels.cc).
absl::StatusOr<ConvGeometry> ComputeConvGeometry(const Tensor& x, const Tensor& f, const ConvParams& p) {
  if (x.shape().rank() != 4) {
    return absl::InvalidArgumentError(absl::StrCat("x must have rank 4 (NHWC), got ", x.shape().DebugString()));
  }
  if (f.shape().rank() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("filter must have rank 4 (HWIO), got ", f.shape().DebugString()));
  }
  ConvGeometry g;
  g.w.n = x.shape().dim(0);
  g.w.h = x.shape().dim(1);
  g.w.w = x.shape().dim(2);
  g.w.c = x.shape().dim(3);
  g.w.kh = f.shape().dim(0);
  g.w.kw = f.shape().dim(1);
  g.cout = f.shape().dim(3);
  g.w.stride = p.stride;
  if (f.shape().dim(2) != g.w.c) {
    return absl::InvalidArgumentError(absl::StrCat("x ", x.shape().DebugString(), " has ", g.w.c,
                                                   " channels but filter ", f.shape().DebugString(), " expects ",
                                                   f.shape().dim(2)));
  }
  if (g.w.kh < 1 || g.w.kw < 1) {
    return absl::InvalidArgumentError(absl::StrCat("filter ", f.shape().DebugString(), " has an empty window"));
  }
  auto wh = ComputeWindow(g.w.h, g.w.kh, g.w.stride, p.padding, "input height");
  if (!wh.ok()) return wh.status();
  auto ww = ComputeWindow(g.w.w, g.w.kw, g.w.stride, p.padding, "input width");
  if (!ww.ok()) return ww.status();
  g.w.ho = wh->out;
  g.w.wo = ww->out;
  g.w.pad_top = wh->pad_before;
  g.w.pad_left = ww->pad_before;
  return g;
}

class ConvOpBase : public OpKernel {
 public:
  explicit ConvOpBase(OpKernelConstruction* c) : OpKernel(c) { GetAttr(c, GetConvParams(c->def()), &params_); }

 protected:
  absl::StatusOr<ConvGeometry> Geometry(OpKernelContext* ctx, bool with_grad) const {
    auto g = ComputeConvGeometry(ctx->input(0), ctx->input(1), params_);
    if (!g.ok() || !with_grad) return g;
    const Tensor& grad = ctx->input(2);
    if (grad.shape() != g->OutputShape()) {
      return absl::InvalidArgumentError(absl::StrCat("gradient ", grad.shape().DebugString(),
                                                     " does not match the convolution's output ",
                                                     g->OutputShape().DebugString()));
    }
    return g;
  }

  ConvParams params_;
};

class Conv2DOp : public ConvOpBase {
 public:
  using ConvOpBase::ConvOpBase;
  void Compute(OpKernelContext* ctx) override {
    auto geo = Geometry(ctx, false);
    OP_REQUIRES_OK(ctx, geo.status());
    const ConvGeometry& g = *geo;
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, g.OutputShape());
    if (out == nullptr || out->NumElements() == 0) return;
    const float* x = ctx->input(0).data<float>();
    const float* f = ctx->input(1).data<float>();
    float* y = out->data<float>();
    cublasHandle_t blas = Gpu(ctx)->cublas();
    if (g.k() == 0) {
      OP_REQUIRES_CUDA(ctx, cudaMemsetAsync(y, 0, out->TotalBytes(), Stream(ctx)), "cudaMemsetAsync (Conv2D)");
      return;
    }
    if (g.IsPointwise()) {
      OP_REQUIRES_OK(ctx, RowMajorGemm(blas, false, false, g.w.n * g.patches(), g.cout, g.w.c, x, g.w.c, f, g.cout,
                                       y, g.cout, false));
      return;
    }
    const int64_t per = std::min(g.w.n, g.ImagesPerChunk());
    Tensor scratch = Scratch(ctx, per * g.patches() * g.k());
    for (int64_t n0 = 0; n0 < g.w.n; n0 += per) {
      const int64_t n1 = std::min(g.w.n, n0 + per);
      const int64_t rows = (n1 - n0) * g.patches();
      OP_REQUIRES_CUDA(ctx, LaunchIm2Col(g.w, x, n0, n1, scratch.data<float>(), Stream(ctx)), "Im2Col kernel");
      OP_REQUIRES_OK(ctx, RowMajorGemm(blas, false, false, rows, g.cout, g.k(), scratch.data<float>(), g.k(), f,
                                       g.cout, y + n0 * g.patches() * g.cout, g.cout, false));
    }
  }
};

class Conv2DBackpropInputOp : public ConvOpBase {
 public:
  using ConvOpBase::ConvOpBase;
  void Compute(OpKernelContext* ctx) override {
    auto geo = Geometry(ctx, true);
    OP_REQUIRES_OK(ctx, geo.status());
    const ConvGeometry& g = *geo;
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, ctx->input(0).shape());
    if (out == nullptr || out->NumElements() == 0) return;
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
      OP_REQUIRES_OK(ctx, RowMajorGemm(blas, false, true, g.w.n * g.patches(), g.w.c, g.cout, grad, g.cout, f,
                                       g.cout, dx, g.w.c, false));
      return;
    }
    const int64_t per = std::min(g.w.n, g.ImagesPerChunk());
    Tensor scratch = Scratch(ctx, per * g.patches() * g.k());
    for (int64_t n0 = 0; n0 < g.w.n; n0 += per) {
      const int64_t n1 = std::min(g.w.n, n0 + per);
      const int64_t rows = (n1 - n0) * g.patches();
      OP_REQUIRES_OK(ctx, RowMajorGemm(blas, false, true, rows, g.k(), g.cout, grad + n0 * g.patches() * g.cout,
                                       g.cout, f, g.cout, scratch.data<float>(), g.k(), false));
      OP_REQUIRES_CUDA(ctx, LaunchCol2Im(g.w, scratch.data<float>(), n0, n1, dx, Stream(ctx)), "Col2Im kernel");
    }
  }
};

class Conv2DBackpropFilterOp : public ConvOpBase {
 public:
  using ConvOpBase::ConvOpBase;
  void Compute(OpKernelContext* ctx) override {
    auto geo = Geometry(ctx, true);
    OP_REQUIRES_OK(ctx, geo.status());
    const ConvGeometry& g = *geo;
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, ctx->input(1).shape());
    if (out == nullptr || out->NumElements() == 0) return;
    float* df = out->data<float>();
    const float* x = ctx->input(0).data<float>();
    const float* grad = ctx->input(2).data<float>();
    cublasHandle_t blas = Gpu(ctx)->cublas();
    if (g.w.n == 0 || g.patches() == 0) {
      OP_REQUIRES_CUDA(ctx, cudaMemsetAsync(df, 0, out->TotalBytes(), Stream(ctx)),
                       "cudaMemsetAsync (Conv2DBackpropFilter)");
      return;
    }
    if (g.IsPointwise()) {
      OP_REQUIRES_OK(ctx, RowMajorGemm(blas, true, false, g.w.c, g.cout, g.w.n * g.patches(), x, g.w.c, grad,
                                       g.cout, df, g.cout, false));
      return;
    }
    const int64_t per = std::min(g.w.n, g.ImagesPerChunk());
    Tensor scratch = Scratch(ctx, per * g.patches() * g.k());
    for (int64_t n0 = 0; n0 < g.w.n; n0 += per) {
      const int64_t n1 = std::min(g.w.n, n0 + per);
      const int64_t rows = (n1 - n0) * g.patches();
      OP_REQUIRES_CUDA(ctx, LaunchIm2Col(g.w, x, n0, n1, scratch.data<float>(), Stream(ctx)), "Im2Col kernel");
      OP_REQUIRES_OK(ctx, RowMajorGemm(blas, true, false, g.k(), g.cout, rows, scratch.data<float>(), g.k(),
                                       grad + n0 * g.patches() * g.cout, g.cout, df, g.cout, n0 > 0));
    }
  }
};

// ---- Pooling -----------------------------------------------------------------------

// The CPU's geometry and messages (pool_kernels.cc).
absl::StatusOr<WindowGeometry> ComputePoolGeometry(const Tensor& x, const PoolParams& p) {
  if (x.shape().rank() != 4) {
    return absl::InvalidArgumentError(absl::StrCat("x must have rank 4 (NHWC), got ", x.shape().DebugString()));
  }
  WindowGeometry g;
  g.n = x.shape().dim(0);
  g.h = x.shape().dim(1);
  g.w = x.shape().dim(2);
  g.c = x.shape().dim(3);
  g.kh = g.kw = p.ksize;
  g.stride = p.stride;
  auto wh = ComputeWindow(g.h, p.ksize, g.stride, p.padding, "input height");
  if (!wh.ok()) return wh.status();
  auto ww = ComputeWindow(g.w, p.ksize, g.stride, p.padding, "input width");
  if (!ww.ok()) return ww.status();
  g.ho = wh->out;
  g.wo = ww->out;
  g.pad_top = wh->pad_before;
  g.pad_left = ww->pad_before;
  return g;
}

TensorShape PoolOutputShape(const WindowGeometry& g) { return TensorShape{g.n, g.ho, g.wo, g.c}; }

class PoolOpBase : public OpKernel {
 public:
  explicit PoolOpBase(OpKernelConstruction* c) : OpKernel(c) { GetAttr(c, GetPoolParams(c->def()), &params_); }

 protected:
  PoolParams params_;
};

class MaxPoolOp : public PoolOpBase {
 public:
  using PoolOpBase::PoolOpBase;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    auto geo = ComputePoolGeometry(x, params_);
    OP_REQUIRES_OK(ctx, geo.status());
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, PoolOutputShape(*geo));
    if (out == nullptr || out->NumElements() == 0) return;
    OP_REQUIRES_CUDA(ctx, LaunchMaxPool(*geo, x.data<float>(), out->data<float>(), Stream(ctx)), "MaxPool kernel");
  }
};

class MaxPoolGradOp : public PoolOpBase {
 public:
  using PoolOpBase::PoolOpBase;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& y = ctx->input(1);
    const Tensor& grad = ctx->input(2);
    auto geo = ComputePoolGeometry(x, params_);
    OP_REQUIRES_OK(ctx, geo.status());
    const TensorShape want = PoolOutputShape(*geo);
    for (const Tensor* t : {&y, &grad}) {
      OP_REQUIRES(ctx, t->shape() == want,
                  absl::InvalidArgumentError(absl::StrCat(t == &y ? "y " : "gradient ", t->shape().DebugString(),
                                                          " does not match the pooling output ",
                                                          want.DebugString())));
    }
    Tensor* out = ctx->allocate_output(0, DType::kFloat32, x.shape());
    if (out == nullptr || out->NumElements() == 0) return;
    OP_REQUIRES_CUDA(ctx,
                     LaunchMaxPoolGrad(*geo, x.data<float>(), grad.data<float>(), out->data<float>(), Stream(ctx)),
                     "MaxPoolGrad kernel");
  }
};

WEFT_REGISTER_KERNEL("MatMul", "GPU", MatMulOp);
WEFT_REGISTER_KERNEL("Conv2D", "GPU", Conv2DOp);
WEFT_REGISTER_KERNEL("Conv2DBackpropInput", "GPU", Conv2DBackpropInputOp);
WEFT_REGISTER_KERNEL("Conv2DBackpropFilter", "GPU", Conv2DBackpropFilterOp);
WEFT_REGISTER_KERNEL("MaxPool", "GPU", MaxPoolOp);
WEFT_REGISTER_KERNEL("MaxPoolGrad", "GPU", MaxPoolGradOp);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
