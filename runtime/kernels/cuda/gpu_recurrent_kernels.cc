// GPU kernels for LSTM, LSTMGrad, GRU and GRUGrad
// (graph/ops/recurrent_ops.cc), on the skeletons the CPU kernels share
// (runtime/kernels/recurrent_kernels.h): the same checks, messages and
// outputs.
//
// The products are cuBLAS GEMMs (FP32, through RowMajorGemm), the gate
// steps recurrent.cu's. A step's B rows of a [B, T, .] buffer are a matrix
// whose rows lie T rows apart, so the per-step products take them in place
// through their leading dimensions (T H for h, T 4H for the gates).
//
//   forward:  z = bias in every row, then z += x kernel over all B T rows;
//             per step, z_t += h_t-1 recurrent_kernel and the gate step.
//   backward: from the last step, the gate step's gradient writes dz_t into
//             [B, T, 4H] scratch and dh_t-1 = dz_t recurrent_kernel^T; then
//             dx = dz kernel^T, dkernel = x^T dz and drecurrent_kernel =
//             hs^T dz, one GEMM each, hs being h a step later ([B, T, H]
//             scratch, zero at step 0), and dbias = the column sums of dz
//             (reduce.cu's BiasAddGrad: deterministic, no atomics).
//
// The GRU (reset_after) the same way with 3H-wide gates, but its recurrent
// side u = h_t-1 recurrent_kernel + bias[1] is kept apart from the input
// side (a [B, 3H] scratch per step: r scales u's n block), and its backward
// pass writes two [B, T, 3H] buffers, dxg for the input side (dx, dkernel,
// dbias row 0) and drg for the recurrent one (drecurrent_kernel, dbias row
// 1, and dh_t-1 = dh_t z + drg_t recurrent_kernel^T).
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/recurrent_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {
namespace {

using kernels::LstmGeometry;

constexpr size_t kFloat = sizeof(float);

const float* F(const Tensor& t) { return t.data<float>(); }
float* F(Tensor* t) { return t->data<float>(); }

absl::Status Zero(Tensor* t, cudaStream_t stream) {
  if (t->TotalBytes() == 0) return absl::OkStatus();
  WEFT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(t->raw_data(), 0, t->TotalBytes(), stream));
  return absl::OkStatus();
}

// y [B, H] = the last step's rows of h [B, T, H], rows T H apart.
absl::Status LastStep(const LstmGeometry& g, const Tensor& h, Tensor* y, cudaStream_t stream) {
  const int64_t H = g.units, T = g.steps;
  WEFT_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(F(y), H * kFloat, F(h) + (T - 1) * H, T * H * kFloat, H * kFloat,
                                              g.batch, cudaMemcpyDeviceToDevice, stream));
  return absl::OkStatus();
}

absl::Status Forward(OpKernelContext* ctx, const LstmGeometry& g, const Tensor& x, const Tensor& kernel,
                     const Tensor& recurrent, const Tensor& bias, Tensor* h, Tensor* c, Tensor* gates, Tensor* y) {
  const int64_t H = g.units, G = 4 * H, T = g.steps, rows = g.batch * T;
  cudaStream_t stream = Stream(ctx);
  cublasHandle_t blas = Gpu(ctx)->cublas();
  float* z = F(gates);
  WEFT_CUDA_RETURN_IF_ERROR(LaunchLstmBiasRows(F(bias), z, rows, G, stream));
  if (g.features > 0) {
    RETURN_IF_ERROR(RowMajorGemm(blas, false, false, rows, G, g.features, F(x), g.features, F(kernel), G, z, G,
                                 /*accumulate=*/true));
  }
  for (int64_t t = 0; t < T; ++t) {
    if (t > 0) {
      RETURN_IF_ERROR(RowMajorGemm(blas, false, false, g.batch, G, H, F(h) + (t - 1) * H, T * H, F(recurrent), G,
                                   z + t * G, T * G, /*accumulate=*/true));
    }
    WEFT_CUDA_RETURN_IF_ERROR(LaunchLstmStep(z, F(c), F(h), g.batch, T, H, t, stream));
  }
  return y == nullptr ? absl::OkStatus() : LastStep(g, *h, y, stream);
}

struct Lstm {
  static void Run(OpKernelContext* ctx, const LstmGeometry& g, const Tensor& x, const Tensor& kernel,
                  const Tensor& recurrent, const Tensor& bias, Tensor* h, Tensor* c, Tensor* gates, Tensor* y) {
    if (g.batch == 0) return;  // every output is empty
    OP_REQUIRES_OK(ctx, Forward(ctx, g, x, kernel, recurrent, bias, h, c, gates, y));
  }
};

// Backpropagation through time: every step's pre-activation gradients into
// dz [B, T, 4H], keeping only dh and dc of the step after ([B, H] each).
absl::Status StepsBackward(OpKernelContext* ctx, const LstmGeometry& g, const Tensor& dy, const Tensor& recurrent,
                           const Tensor& c, const Tensor& gates, float* dz) {
  const int64_t H = g.units, G = 4 * H, T = g.steps;
  cudaStream_t stream = Stream(ctx);
  ASSIGN_OR_RETURN(Tensor carry, Scratch(ctx, 2 * g.batch * H));
  float* dh_next = F(&carry);
  float* dc_next = dh_next + g.batch * H;
  WEFT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dh_next, 0, 2 * g.batch * H * kFloat, stream));
  for (int64_t t = T - 1; t >= 0; --t) {
    WEFT_CUDA_RETURN_IF_ERROR(
        LaunchLstmStepGrad(F(dy), g.sequences, F(gates), F(c), dh_next, dc_next, dz, g.batch, T, H, t, stream));
    if (t > 0) {  // dh_t-1 = dz_t recurrent_kernel^T
      RETURN_IF_ERROR(RowMajorGemm(Gpu(ctx)->cublas(), false, true, g.batch, H, G, dz + t * G, T * G, F(recurrent),
                                   G, dh_next, H, /*accumulate=*/false));
    }
  }
  return absl::OkStatus();
}

// drecurrent_kernel = sum over t >= 1 of h_t-1^T dz_t, as one GEMM over all
// B T rows of hs, h moved a step later with zero rows at step 0. dz is
// [B, T, blocks H]: the LSTM's dz or the GRU's drg.
absl::Status RecurrentGradient(OpKernelContext* ctx, const LstmGeometry& g, const Tensor& h, const float* dz,
                               Tensor* drecurrent) {
  const int64_t H = g.units, G = g.blocks * H, T = g.steps, rows = g.batch * T;
  cudaStream_t stream = Stream(ctx);
  if (T == 1) return Zero(drecurrent, stream);
  ASSIGN_OR_RETURN(Tensor shifted, Scratch(ctx, rows * H));
  float* hs = F(&shifted);
  WEFT_CUDA_RETURN_IF_ERROR(cudaMemset2DAsync(hs, T * H * kFloat, 0, H * kFloat, g.batch, stream));
  WEFT_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(hs + H, T * H * kFloat, F(h), T * H * kFloat, (T - 1) * H * kFloat,
                                              g.batch, cudaMemcpyDeviceToDevice, stream));
  return RowMajorGemm(Gpu(ctx)->cublas(), true, false, H, G, rows, hs, H, dz, G, F(drecurrent), G,
                      /*accumulate=*/false);
}

// The column sums of each of mats ([rows, cols] each) into consecutive
// cols-wide rows of out (dbias: one row for the LSTM, two for the GRU),
// through BiasAddGrad; the launches share one partial scratch, which the
// stream's order makes safe.
absl::Status ColumnSums(OpKernelContext* ctx, std::initializer_list<const float*> mats, int64_t rows, int64_t cols,
                        float* out) {
  Tensor partial_holder;
  float* partial = nullptr;
  if (const int64_t n = BiasAddGradScratchFloats(rows, cols); n > 0) {
    ASSIGN_OR_RETURN(partial_holder, Scratch(ctx, n));
    partial = F(&partial_holder);
  }
  for (const float* m : mats) {
    WEFT_CUDA_RETURN_IF_ERROR(LaunchBiasAddGrad(m, rows, cols, partial, out, Stream(ctx)));
    out += cols;
  }
  return absl::OkStatus();
}

absl::Status Backward(OpKernelContext* ctx, const LstmGeometry& g, const Tensor& dy, const Tensor& x,
                      const Tensor& kernel, const Tensor& recurrent, const Tensor& h, const Tensor& c,
                      const Tensor& gates, Tensor* dx, Tensor* dkernel, Tensor* drecurrent, Tensor* dbias) {
  const int64_t G = 4 * g.units, rows = g.batch * g.steps, nf = g.features;
  cudaStream_t stream = Stream(ctx);
  if (rows == 0) {  // no examples: zero weight gradients, an empty dx
    for (Tensor* t : {dkernel, drecurrent, dbias}) RETURN_IF_ERROR(Zero(t, stream));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Tensor dz_holder, Scratch(ctx, rows * G));
  float* dz = F(&dz_holder);
  RETURN_IF_ERROR(StepsBackward(ctx, g, dy, recurrent, c, gates, dz));
  cublasHandle_t blas = Gpu(ctx)->cublas();
  if (nf > 0) {
    RETURN_IF_ERROR(RowMajorGemm(blas, false, true, rows, nf, G, dz, G, F(kernel), G, F(dx), nf, false));
    RETURN_IF_ERROR(RowMajorGemm(blas, true, false, nf, G, rows, F(x), nf, dz, G, F(dkernel), G, false));
  }
  RETURN_IF_ERROR(RecurrentGradient(ctx, g, h, dz, drecurrent));
  return ColumnSums(ctx, {dz}, rows, G, F(dbias));
}

struct LstmGrad {
  static void Run(OpKernelContext* ctx, const LstmGeometry& g, const Tensor& dy, const Tensor& x,
                  const Tensor& kernel, const Tensor& recurrent, const Tensor& h, const Tensor& c,
                  const Tensor& gates, Tensor* dx, Tensor* dkernel, Tensor* drecurrent, Tensor* dbias) {
    OP_REQUIRES_OK(ctx, Backward(ctx, g, dy, x, kernel, recurrent, h, c, gates, dx, dkernel, drecurrent, dbias));
  }
};

absl::Status GruForward(OpKernelContext* ctx, const LstmGeometry& g, const Tensor& x, const Tensor& kernel,
                        const Tensor& recurrent, const Tensor& bias, Tensor* h, Tensor* gates, Tensor* hn,
                        Tensor* y) {
  const int64_t H = g.units, G = 3 * H, T = g.steps, rows = g.batch * T;
  cudaStream_t stream = Stream(ctx);
  cublasHandle_t blas = Gpu(ctx)->cublas();
  float* z = F(gates);
  WEFT_CUDA_RETURN_IF_ERROR(LaunchLstmBiasRows(F(bias), z, rows, G, stream));  // bias row 0
  if (g.features > 0) {
    RETURN_IF_ERROR(RowMajorGemm(blas, false, false, rows, G, g.features, F(x), g.features, F(kernel), G, z, G,
                                 /*accumulate=*/true));
  }
  ASSIGN_OR_RETURN(Tensor u_holder, Scratch(ctx, g.batch * G));
  float* u = F(&u_holder);
  for (int64_t t = 0; t < T; ++t) {
    if (t > 0) {  // u = h_t-1 recurrent_kernel; the step adds bias row 1
      RETURN_IF_ERROR(RowMajorGemm(blas, false, false, g.batch, G, H, F(h) + (t - 1) * H, T * H, F(recurrent), G,
                                   u, G, /*accumulate=*/false));
    }
    WEFT_CUDA_RETURN_IF_ERROR(LaunchGruStep(z, u, F(bias) + G, F(hn), F(h), g.batch, T, H, t, stream));
  }
  return y == nullptr ? absl::OkStatus() : LastStep(g, *h, y, stream);
}

struct Gru {
  static void Run(OpKernelContext* ctx, const LstmGeometry& g, const Tensor& x, const Tensor& kernel,
                  const Tensor& recurrent, const Tensor& bias, Tensor* h, Tensor* gates, Tensor* hn, Tensor* y) {
    if (g.batch == 0) return;  // every output is empty
    OP_REQUIRES_OK(ctx, GruForward(ctx, g, x, kernel, recurrent, bias, h, gates, hn, y));
  }
};

// The GRU's backpropagation through time: every step's gradients into dxg
// and drg [B, T, 3H], keeping only dh of the step after ([B, H]).
absl::Status GruStepsBackward(OpKernelContext* ctx, const LstmGeometry& g, const Tensor& dy, const Tensor& recurrent,
                              const Tensor& h, const Tensor& gates, const Tensor& hn, float* dxg, float* drg) {
  const int64_t H = g.units, G = 3 * H, T = g.steps;
  cudaStream_t stream = Stream(ctx);
  ASSIGN_OR_RETURN(Tensor carry, Scratch(ctx, g.batch * H));
  float* dh_next = F(&carry);
  WEFT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dh_next, 0, g.batch * H * kFloat, stream));
  for (int64_t t = T - 1; t >= 0; --t) {
    WEFT_CUDA_RETURN_IF_ERROR(LaunchGruStepGrad(F(dy), g.sequences, F(gates), F(h), F(hn), dh_next, dxg, drg,
                                                g.batch, T, H, t, stream));
    if (t > 0) {  // dh_t-1 = dh_t z (the step's) + drg_t recurrent_kernel^T
      RETURN_IF_ERROR(RowMajorGemm(Gpu(ctx)->cublas(), false, true, g.batch, H, G, drg + t * G, T * G,
                                   F(recurrent), G, dh_next, H, /*accumulate=*/true));
    }
  }
  return absl::OkStatus();
}

absl::Status GruBackward(OpKernelContext* ctx, const LstmGeometry& g, const Tensor& dy, const Tensor& x,
                         const Tensor& kernel, const Tensor& recurrent, const Tensor& h, const Tensor& gates,
                         const Tensor& hn, Tensor* dx, Tensor* dkernel, Tensor* drecurrent, Tensor* dbias) {
  const int64_t G = 3 * g.units, rows = g.batch * g.steps, nf = g.features;
  if (rows == 0) {  // no examples: zero weight gradients, an empty dx
    for (Tensor* t : {dkernel, drecurrent, dbias}) RETURN_IF_ERROR(Zero(t, Stream(ctx)));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Tensor holder, Scratch(ctx, 2 * rows * G));
  float* dxg = F(&holder);
  float* drg = dxg + rows * G;
  RETURN_IF_ERROR(GruStepsBackward(ctx, g, dy, recurrent, h, gates, hn, dxg, drg));
  cublasHandle_t blas = Gpu(ctx)->cublas();
  if (nf > 0) {
    RETURN_IF_ERROR(RowMajorGemm(blas, false, true, rows, nf, G, dxg, G, F(kernel), G, F(dx), nf, false));
    RETURN_IF_ERROR(RowMajorGemm(blas, true, false, nf, G, rows, F(x), nf, dxg, G, F(dkernel), G, false));
  }
  RETURN_IF_ERROR(RecurrentGradient(ctx, g, h, drg, drecurrent));
  return ColumnSums(ctx, {dxg, drg}, rows, G, F(dbias));  // dbias rows 0 and 1
}

struct GruGrad {
  static void Run(OpKernelContext* ctx, const LstmGeometry& g, const Tensor& dy, const Tensor& x,
                  const Tensor& kernel, const Tensor& recurrent, const Tensor& h, const Tensor& gates,
                  const Tensor& hn, Tensor* dx, Tensor* dkernel, Tensor* drecurrent, Tensor* dbias) {
    OP_REQUIRES_OK(ctx, GruBackward(ctx, g, dy, x, kernel, recurrent, h, gates, hn, dx, dkernel, drecurrent, dbias));
  }
};

WEFT_REGISTER_KERNEL("GRU", "GPU", kernels::GruKernel<Gru>);
WEFT_REGISTER_KERNEL("GRUGrad", "GPU", kernels::GruGradKernel<GruGrad>);
WEFT_REGISTER_KERNEL("LSTM", "GPU", kernels::LstmKernel<Lstm>);
WEFT_REGISTER_KERNEL("LSTMGrad", "GPU", kernels::LstmGradKernel<LstmGrad>);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
