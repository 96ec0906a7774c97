// Optimizer updates and ApplyMovingAverage, one launch per variable.
// Learning rates and momenta are attributes (kernel arguments); Adam's step
// count t is a device scalar that the kernel reads and increments itself, so
// no update reads device memory on the host.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/cuda/launch_util.cuh"

namespace weft {
namespace gpu_kernels {
namespace {

__global__ void GradientDescentKernel(float* __restrict__ var, const float* __restrict__ grad, float lr, int64_t n) {
  WEFT_GRID_STRIDE(i, n) { var[i] -= lr * grad[i]; }
}

template <bool kNesterov>
__global__ void MomentumKernel(float* __restrict__ var, float* __restrict__ accum, const float* __restrict__ grad,
                               float lr, float mu, int64_t n) {
  WEFT_GRID_STRIDE(i, n) {
    const float g = grad[i];
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

// Thread 0 of each block reads t and computes lr_t as the CPU does (in
// double); the block that takes the last ticket, after every block has read
// t, stores t + 1 and resets the ticket for the next launch.
__global__ void AdamKernel(float* __restrict__ var, float* __restrict__ m, float* __restrict__ v, float* t,
                           const float* __restrict__ grad, float lr, float b1, float b2, float eps, int64_t n,
                           unsigned int* ticket) {
  __shared__ float lr_t_shared;
  if (threadIdx.x == 0) {
    const float t_new = *t + 1.0f;
    const double step = t_new;
    lr_t_shared = static_cast<float>(static_cast<double>(lr) * sqrt(1.0 - pow(static_cast<double>(b2), step)) /
                                     (1.0 - pow(static_cast<double>(b1), step)));
    __threadfence();
    if (atomicAdd(ticket, 1u) == gridDim.x - 1) {
      *t = t_new;
      *ticket = 0;
    }
  }
  __syncthreads();
  const float lr_t = lr_t_shared;
  WEFT_GRID_STRIDE(i, n) {
    const float g = grad[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    var[i] -= lr_t * mi / (sqrtf(vi) + eps);
  }
}

}  // namespace

cudaError_t LaunchApplyGradientDescent(float* var, const float* grad, float lr, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  GradientDescentKernel<<<BlocksFor(n), kThreads, 0, stream>>>(var, grad, lr, n);
  return cudaGetLastError();
}

cudaError_t LaunchApplyMomentum(float* var, float* accum, const float* grad, float lr, float momentum,
                                bool nesterov, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (nesterov) {
    MomentumKernel<true><<<BlocksFor(n), kThreads, 0, stream>>>(var, accum, grad, lr, momentum, n);
  } else {
    MomentumKernel<false><<<BlocksFor(n), kThreads, 0, stream>>>(var, accum, grad, lr, momentum, n);
  }
  return cudaGetLastError();
}

cudaError_t LaunchApplyMovingAverage(float* var, const float* value, float momentum, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  MovingAverageKernel<<<BlocksFor(n), kThreads, 0, stream>>>(var, value, momentum, n);
  return cudaGetLastError();
}

cudaError_t LaunchApplyAdam(float* var, float* m, float* v, float* t, const float* grad, float lr, float beta1,
                            float beta2, float epsilon, int64_t n, unsigned int* ticket, cudaStream_t stream) {
  // Launches even for n == 0: t still counts the update, as on the CPU.
  AdamKernel<<<BlocksFor(n), kThreads, 0, stream>>>(var, m, v, t, grad, lr, beta1, beta2, epsilon, n, ticket);
  return cudaGetLastError();
}

}  // namespace gpu_kernels
}  // namespace weft
