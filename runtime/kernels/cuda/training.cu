// Optimizer updates and ApplyMovingAverage, one launch per variable.
// Schedules and momenta are attributes (kernel arguments); an update's count
// t is a device scalar that the kernel reads and increments itself, so no
// update reads device memory on the host.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/cuda/launch_util.cuh"

namespace weft {
namespace gpu_kernels {
namespace {

// This update's rate and count, the same in every block: thread 0 of each
// block reads t and evaluates the schedule at t + 1 as the CPU does (in
// double); the block that takes the last ticket, after every block has read
// t, stores t + 1 and resets the ticket for the next launch. Called by every
// thread of the block.
struct Rate {
  float lr;    // the schedule's rate at this update
  double step; // this update's count (0 without one)
  bool skip;   // count.guard is not finite: change nothing
};

__device__ Rate BlockRate(const LrSchedule& schedule, UpdateCount count) {
  __shared__ Rate shared;
  if (threadIdx.x == 0) {
    if (count.guard != nullptr && !isfinite(*count.guard)) {
      shared = Rate{0.0f, 0.0, true};  // every block skips, so the ticket stays 0
    } else if (count.t == nullptr) {
      shared = Rate{schedule.learning_rate, 0.0, false};
    } else {
      const float t_new = *count.t + 1.0f;
      shared = Rate{static_cast<float>(schedule.At(t_new)), static_cast<double>(t_new), false};
      __threadfence();
      if (atomicAdd(count.ticket, 1u) == gridDim.x - 1) {
        *count.t = t_new;
        *count.ticket = 0;
      }
    }
  }
  __syncthreads();
  return shared;
}

__global__ void GradientDescentKernel(float* __restrict__ var, const float* __restrict__ grad, LrSchedule schedule,
                                      float wd, UpdateCount count, int64_t n) {
  const Rate rate = BlockRate(schedule, count);
  if (rate.skip) return;
  const float lr = rate.lr;
  WEFT_GRID_STRIDE(i, n) { var[i] -= lr * (grad[i] + wd * var[i]); }
}

template <bool kNesterov>
__global__ void MomentumKernel(float* __restrict__ var, float* __restrict__ accum, const float* __restrict__ grad,
                               LrSchedule schedule, float wd, float mu, UpdateCount count, int64_t n) {
  const Rate rate = BlockRate(schedule, count);
  if (rate.skip) return;
  const float lr = rate.lr;
  WEFT_GRID_STRIDE(i, n) {
    const float g = grad[i] + wd * var[i];
    const float a = accum[i] * mu + g;
    accum[i] = a;
    if (kNesterov) {
      var[i] -= lr * (g + mu * a);
    } else {
      var[i] -= lr * a;
    }
  }
}

__global__ void MovingAverageKernel(float* __restrict__ var, const float* __restrict__ value, float m, int64_t n) {
  const float w = 1.0f - m;
  WEFT_GRID_STRIDE(i, n) { var[i] = m * var[i] + w * value[i]; }
}

__global__ void AdamKernel(float* __restrict__ var, float* __restrict__ m, float* __restrict__ v,
                           const float* __restrict__ grad, LrSchedule schedule, float wd, float b1, float b2,
                           float eps, UpdateCount count, int64_t n) {
  const Rate rate = BlockRate(schedule, count);
  if (rate.skip) return;
  const double step = rate.step;
  const float lr_t = static_cast<float>(static_cast<double>(rate.lr) * sqrt(1.0 - pow(static_cast<double>(b2), step)) /
                                        (1.0 - pow(static_cast<double>(b1), step)));
  const float keep = static_cast<float>(1.0 - static_cast<double>(rate.lr) * wd);
  WEFT_GRID_STRIDE(i, n) {
    const float g = grad[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    var[i] = keep * var[i] - lr_t * mi / (sqrtf(vi) + eps);
  }
}

// Adds the sum of x's squares (in double) to *acc: a block reduction in
// shared memory, then one atomic add per block.
__global__ void SumSquaresKernel(const float* __restrict__ x, int64_t n, double* acc) {
  __shared__ double part[kThreads];
  double s = 0;
  WEFT_GRID_STRIDE(i, n) { s += static_cast<double>(x[i]) * x[i]; }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(acc, part[0]);
}

__global__ void NormScaleKernel(double* acc, float clip, float* scale, float* norm) {
  const double global = sqrt(*acc);
  *norm = static_cast<float>(global);
  *scale = isfinite(global) ? static_cast<float>(static_cast<double>(clip) / (global > clip ? global : clip))
                            : __int_as_float(0x7fc00000);  // NaN
  *acc = 0;  // ready for the next step
}

// Loss scaling: out = g / scale, and a flag for a non-finite element; block
// row blockIdx.y takes gradient blockIdx.y of the table.
__global__ void UnscaleKernel(UnscaleTable table, const float* __restrict__ scale, int* overflow_flag) {
  const int t = blockIdx.y;
  const float* __restrict__ g = table.g[t];
  float* __restrict__ out = table.out[t];
  const float inv = 1.0f / *scale;
  bool bad = false;
  WEFT_GRID_STRIDE(i, table.n[t]) {
    const float x = g[i];
    bad |= !isfinite(x);
    out[i] = x * inv;
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicExch(overflow_flag, 1);
}

// One thread per gradient of the table, then (with `finish`) the step's
// overflow and the flag's reset once every thread has read it.
__global__ void MarkOverflowKernel(UnscaleTable table, int* overflow_flag, bool finish, float* overflow) {
  const bool marked = *overflow_flag != 0;
  const int t = threadIdx.x;
  if (marked && t < table.count && table.n[t] > 0) table.out[t][0] = __int_as_float(0x7fc00000);  // NaN
  __syncthreads();
  if (finish && t == 0) {
    *overflow = marked ? __int_as_float(0x7fc00000) : 0.0f;
    *overflow_flag = 0;
  }
}

__global__ void ApplyLossScaleKernel(float* scale, float* good_steps, const float* overflow, float interval) {
  if (!isfinite(*overflow)) {
    *scale = fmaxf(*scale * 0.5f, 1.0f);
    *good_steps = 0.0f;
    return;
  }
  const float good = *good_steps + 1.0f;
  if (good >= interval) {
    const float grown = *scale * 2.0f;
    if (isfinite(grown)) *scale = grown;
    *good_steps = 0.0f;
  } else {
    *good_steps = good;
  }
}

}  // namespace

cudaError_t LaunchUnscale(const UnscaleTable& table, const float* scale, int* overflow_flag, cudaStream_t stream) {
  int64_t most = 0;
  for (int t = 0; t < table.count; ++t) most = table.n[t] > most ? table.n[t] : most;
  if (most == 0) return cudaSuccess;
  UnscaleKernel<<<dim3(BlocksFor(most), table.count), kThreads, 0, stream>>>(table, scale, overflow_flag);
  return cudaGetLastError();
}

cudaError_t LaunchMarkOverflow(const UnscaleTable& table, int* overflow_flag, bool finish, float* overflow,
                               cudaStream_t stream) {
  MarkOverflowKernel<<<1, kUnscaleTable, 0, stream>>>(table, overflow_flag, finish, overflow);
  return cudaGetLastError();
}

cudaError_t LaunchApplyLossScale(float* scale, float* good_steps, const float* overflow, float growth_interval,
                                 cudaStream_t stream) {
  ApplyLossScaleKernel<<<1, 1, 0, stream>>>(scale, good_steps, overflow, growth_interval);
  return cudaGetLastError();
}

// A launch with a count runs even for n == 0: t still counts the update, as
// on the CPU.
cudaError_t LaunchApplyGradientDescent(float* var, const float* grad, const LrSchedule& rate, float weight_decay,
                                       UpdateCount count, int64_t n, cudaStream_t stream) {
  if (n == 0 && count.t == nullptr) return cudaSuccess;
  GradientDescentKernel<<<BlocksFor(n), kThreads, 0, stream>>>(var, grad, rate, weight_decay, count, n);
  return cudaGetLastError();
}

cudaError_t LaunchApplyMomentum(float* var, float* accum, const float* grad, const LrSchedule& rate,
                                float weight_decay, float momentum, bool nesterov, UpdateCount count, int64_t n,
                                cudaStream_t stream) {
  if (n == 0 && count.t == nullptr) return cudaSuccess;
  if (nesterov) {
    MomentumKernel<true>
        <<<BlocksFor(n), kThreads, 0, stream>>>(var, accum, grad, rate, weight_decay, momentum, count, n);
  } else {
    MomentumKernel<false>
        <<<BlocksFor(n), kThreads, 0, stream>>>(var, accum, grad, rate, weight_decay, momentum, count, n);
  }
  return cudaGetLastError();
}

cudaError_t LaunchApplyMovingAverage(float* var, const float* value, float momentum, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  MovingAverageKernel<<<BlocksFor(n), kThreads, 0, stream>>>(var, value, momentum, n);
  return cudaGetLastError();
}

cudaError_t LaunchApplyAdam(float* var, float* m, float* v, const float* grad, const LrSchedule& rate,
                            float weight_decay, float beta1, float beta2, float epsilon, UpdateCount count, int64_t n,
                            cudaStream_t stream) {
  AdamKernel<<<BlocksFor(n), kThreads, 0, stream>>>(var, m, v, grad, rate, weight_decay, beta1, beta2, epsilon,
                                                    count, n);
  return cudaGetLastError();
}

cudaError_t LaunchSumSquares(const float* x, int64_t n, double* acc, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  SumSquaresKernel<<<BlocksFor(n), kThreads, 0, stream>>>(x, n, acc);
  return cudaGetLastError();
}

cudaError_t LaunchNormScale(double* acc, float clip_norm, float* scale, float* norm, cudaStream_t stream) {
  NormScaleKernel<<<1, 1, 0, stream>>>(acc, clip_norm, scale, norm);
  return cudaGetLastError();
}

}  // namespace gpu_kernels
}  // namespace weft
