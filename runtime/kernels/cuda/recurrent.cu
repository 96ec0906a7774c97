// The elementwise parts of the LSTM and the GRU; the products are cuBLAS's
// (gpu_recurrent_kernels.cc). Layouts as recurrent_kernels.h: h, c and hn
// are [batch, steps, units], the gates [batch, steps, 4 units] (LSTM: i, f,
// g, o) or [batch, steps, 3 units] (GRU: z, r, n), blocks side by side.
//
// A step's launch has a thread per (example, unit): it reads that unit's
// gates of the step and the state of the step before, and writes the same
// positions, so a step is one launch over batch * units threads and the
// steps follow each other on the stream. The arithmetic is the CPU's
// (cpu/recurrent_kernels.cc), expression for expression.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/cuda/launch_util.cuh"

namespace weft {
namespace gpu_kernels {
namespace {

__device__ __forceinline__ float Sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

__global__ void BiasRowsKernel(const float* __restrict__ bias, float* __restrict__ z, int64_t rows, int64_t cols) {
  WEFT_GRID_STRIDE(i, rows * cols) { z[i] = bias[i % cols]; }
}

// Thread (b, k) of step t: z holds the step's pre-activations and becomes
// its activated gates.
__global__ void LstmStepKernel(float* __restrict__ z, float* __restrict__ c, float* __restrict__ h, int64_t batch,
                               int64_t steps, int64_t units, int64_t t) {
  WEFT_GRID_STRIDE(n, batch * units) {
    const int64_t b = n / units, k = n % units;
    const int64_t at = b * steps + t;
    float* gt = z + at * 4 * units;
    const float i = Sigmoid(gt[k]), f = Sigmoid(gt[units + k]), gg = tanhf(gt[2 * units + k]),
                o = Sigmoid(gt[3 * units + k]);
    gt[k] = i;
    gt[units + k] = f;
    gt[2 * units + k] = gg;
    gt[3 * units + k] = o;
    const float ct = (t > 0 ? f * c[(at - 1) * units + k] : 0.0f) + i * gg;
    c[at * units + k] = ct;
    h[at * units + k] = o * tanhf(ct);
  }
}

// Thread (b, k) of step t: dh_next and dc_next hold dL/dh_t and dL/dc_t
// from step t + 1; dc_next becomes dL/dc_t-1 (dh_next is the caller's
// product, after this launch).
__global__ void LstmStepGradKernel(const float* __restrict__ dy, bool sequences, const float* __restrict__ gates,
                                   const float* __restrict__ c, const float* __restrict__ dh_next,
                                   float* __restrict__ dc_next, float* __restrict__ dz, int64_t batch, int64_t steps,
                                   int64_t units, int64_t t) {
  WEFT_GRID_STRIDE(n, batch * units) {
    const int64_t b = n / units, k = n % units;
    const int64_t at = b * steps + t, G = 4 * units;
    const float* gt = gates + at * G;
    const float i = gt[k], f = gt[units + k], gg = gt[2 * units + k], o = gt[3 * units + k];
    const float dyt = sequences ? dy[at * units + k] : (t == steps - 1 ? dy[b * units + k] : 0.0f);
    const float dh = dyt + dh_next[n];
    const float tc = tanhf(c[at * units + k]);
    const float dc = dh * o * (1.0f - tc * tc) + dc_next[n];
    float* dzt = dz + at * G;
    dzt[k] = dc * gg * i * (1.0f - i);
    dzt[units + k] = (t > 0 ? dc * c[(at - 1) * units + k] : 0.0f) * f * (1.0f - f);
    dzt[2 * units + k] = dc * i * (1.0f - gg * gg);
    dzt[3 * units + k] = dh * tc * o * (1.0f - o);
    dc_next[n] = dc * f;
  }
}

// Thread (b, k) of GRU step t: z's step rows hold the input side's
// pre-activations (x kernel + bias[0]) and become the activated z, r, n; u
// [batch, 3 units] holds h_t-1 recurrent_kernel (unread at t = 0, where the
// product is zero) and rec_bias (bias[1]) is added here, as the CPU adds it
// after its product.
__global__ void GruStepKernel(float* __restrict__ z, const float* __restrict__ u, const float* __restrict__ rec_bias,
                              float* __restrict__ hn, float* __restrict__ h, int64_t batch, int64_t steps,
                              int64_t units, int64_t t) {
  WEFT_GRID_STRIDE(n, batch * units) {
    const int64_t b = n / units, k = n % units;
    const int64_t at = b * steps + t, G = 3 * units;
    float* gt = z + at * G;
    const float* ub = u + b * G;
    const float uz = (t > 0 ? ub[k] : 0.0f) + rec_bias[k];
    const float ur = (t > 0 ? ub[units + k] : 0.0f) + rec_bias[units + k];
    const float un = (t > 0 ? ub[2 * units + k] : 0.0f) + rec_bias[2 * units + k];
    const float zg = Sigmoid(gt[k] + uz), r = Sigmoid(gt[units + k] + ur);
    const float cand = tanhf(gt[2 * units + k] + r * un);
    gt[k] = zg;
    gt[units + k] = r;
    gt[2 * units + k] = cand;
    hn[at * units + k] = un;
    h[at * units + k] = (t > 0 ? zg * h[(at - 1) * units + k] : 0.0f) + (1.0f - zg) * cand;
  }
}

// Thread (b, k) of GRU step t: dh_next holds dL/dh_t through step t + 1 and
// becomes the direct path's share of dL/dh_t-1 (dh z; the caller's product
// adds drg_t recurrent_kernel^T). dxg gets the input side's pre-activation
// gradients, drg the recurrent side's (its n block scaled by r).
__global__ void GruStepGradKernel(const float* __restrict__ dy, bool sequences, const float* __restrict__ gates,
                                  const float* __restrict__ h, const float* __restrict__ hn,
                                  float* __restrict__ dh_next, float* __restrict__ dxg, float* __restrict__ drg,
                                  int64_t batch, int64_t steps, int64_t units, int64_t t) {
  WEFT_GRID_STRIDE(n, batch * units) {
    const int64_t b = n / units, k = n % units;
    const int64_t at = b * steps + t, G = 3 * units;
    const float* gt = gates + at * G;
    const float zg = gt[k], r = gt[units + k], cand = gt[2 * units + k];
    const float dyt = sequences ? dy[at * units + k] : (t == steps - 1 ? dy[b * units + k] : 0.0f);
    const float dh = dyt + dh_next[n];
    const float prev = t > 0 ? h[(at - 1) * units + k] : 0.0f;
    const float dn = dh * (1.0f - zg) * (1.0f - cand * cand);
    const float dz = dh * (prev - cand) * zg * (1.0f - zg);
    const float dr = dn * hn[at * units + k] * r * (1.0f - r);
    float* dxt = dxg + at * G;
    float* drt = drg + at * G;
    dxt[k] = drt[k] = dz;
    dxt[units + k] = drt[units + k] = dr;
    dxt[2 * units + k] = dn;
    drt[2 * units + k] = dn * r;
    dh_next[n] = dh * zg;
  }
}

}  // namespace

cudaError_t LaunchLstmBiasRows(const float* bias, float* z, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  BiasRowsKernel<<<BlocksFor(rows * cols), kThreads, 0, stream>>>(bias, z, rows, cols);
  return cudaGetLastError();
}

cudaError_t LaunchLstmStep(float* z, float* c, float* h, int64_t batch, int64_t steps, int64_t units, int64_t t,
                           cudaStream_t stream) {
  if (batch == 0 || units == 0) return cudaSuccess;
  LstmStepKernel<<<BlocksFor(batch * units), kThreads, 0, stream>>>(z, c, h, batch, steps, units, t);
  return cudaGetLastError();
}

cudaError_t LaunchLstmStepGrad(const float* dy, bool sequences, const float* gates, const float* c,
                               const float* dh_next, float* dc_next, float* dz, int64_t batch, int64_t steps,
                               int64_t units, int64_t t, cudaStream_t stream) {
  if (batch == 0 || units == 0) return cudaSuccess;
  LstmStepGradKernel<<<BlocksFor(batch * units), kThreads, 0, stream>>>(dy, sequences, gates, c, dh_next, dc_next,
                                                                       dz, batch, steps, units, t);
  return cudaGetLastError();
}

cudaError_t LaunchGruStep(float* z, const float* u, const float* rec_bias, float* hn, float* h, int64_t batch,
                          int64_t steps, int64_t units, int64_t t, cudaStream_t stream) {
  if (batch == 0 || units == 0) return cudaSuccess;
  GruStepKernel<<<BlocksFor(batch * units), kThreads, 0, stream>>>(z, u, rec_bias, hn, h, batch, steps, units, t);
  return cudaGetLastError();
}

cudaError_t LaunchGruStepGrad(const float* dy, bool sequences, const float* gates, const float* h, const float* hn,
                              float* dh_next, float* dxg, float* drg, int64_t batch, int64_t steps, int64_t units,
                              int64_t t, cudaStream_t stream) {
  if (batch == 0 || units == 0) return cudaSuccess;
  GruStepGradKernel<<<BlocksFor(batch * units), kThreads, 0, stream>>>(dy, sequences, gates, h, hn, dh_next, dxg,
                                                                      drg, batch, steps, units, t);
  return cudaGetLastError();
}

}  // namespace gpu_kernels
}  // namespace weft
