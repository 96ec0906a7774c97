// CPU kernels for LSTM and GRU and their gradients (graph/ops/recurrent_ops.cc) on the
// shared skeletons (runtime/kernels/recurrent_kernels.h).
//
// The input projection of every step is one Eigen GEMM over all B T rows
// (x kernel, into gates); each step then adds h_t-1 recurrent_kernel for
// its B rows (strided views of the [B, T, .] buffers) and applies the gate
// functions in place. The backward pass walks the steps from the last,
// keeping only dh and dc of the step after, writes every step's
// pre-activation gradients into one [B, T, 4H] buffer, and takes dx,
// dkernel and drecurrent_kernel from it in three GEMMs over all steps.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "Eigen/Core"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/recurrent_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

using kernels::LstmGeometry;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Map = Eigen::Map<RowMatrix>;
using ConstMap = Eigen::Map<const RowMatrix>;
using Strided = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;
using ConstStrided = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;

float Sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// Step t's rows of a [B, T, width] buffer: B rows of `width`, T width apart.
Strided StepRows(float* p, const LstmGeometry& g, int64_t width, int64_t t) {
  return Strided(p + t * width, g.batch, width, Eigen::OuterStride<>(g.steps * width));
}
ConstStrided StepRows(const float* p, const LstmGeometry& g, int64_t width, int64_t t) {
  return ConstStrided(p + t * width, g.batch, width, Eigen::OuterStride<>(g.steps * width));
}

// y [B, H] = the last step's rows of h [B, T, H].
void LastStep(const LstmGeometry& g, const float* h, Tensor* y) {
  for (int64_t b = 0; b < g.batch; ++b) {
    std::memcpy(y->data<float>() + b * g.units, h + (b * g.steps + g.steps - 1) * g.units, sizeof(float) * g.units);
  }
}

struct Lstm {
  static void Run(OpKernelContext* ctx, const LstmGeometry& g, const Tensor& x, const Tensor& kernel,
                  const Tensor& recurrent, const Tensor& bias, Tensor* h, Tensor* c, Tensor* gates, Tensor* y) {
    const int64_t H = g.units, G = 4 * H, rows = g.batch * g.steps;
    float* zp = gates->data<float>();
    Map z(zp, rows, G);
    z.noalias() = ConstMap(x.data<float>(), rows, g.features) * ConstMap(kernel.data<float>(), g.features, G);
    z.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias.data<float>(), G);
    const ConstMap u(recurrent.data<float>(), H, G);
    float* hp = h->data<float>();
    float* cp = c->data<float>();
    for (int64_t t = 0; t < g.steps; ++t) {
      if (t > 0) StepRows(zp, g, G, t).noalias() += StepRows(static_cast<const float*>(hp), g, H, t - 1) * u;
      for (int64_t b = 0; b < g.batch; ++b) {
        float* gt = zp + (b * g.steps + t) * G;
        const float* c_prev = t > 0 ? cp + (b * g.steps + t - 1) * H : nullptr;
        float* ct = cp + (b * g.steps + t) * H;
        float* ht = hp + (b * g.steps + t) * H;
        for (int64_t k = 0; k < H; ++k) {
          const float i = Sigmoid(gt[k]), f = Sigmoid(gt[H + k]), gg = std::tanh(gt[2 * H + k]),
                      o = Sigmoid(gt[3 * H + k]);
          gt[k] = i;
          gt[H + k] = f;
          gt[2 * H + k] = gg;
          gt[3 * H + k] = o;
          ct[k] = (c_prev != nullptr ? f * c_prev[k] : 0.0f) + i * gg;
          ht[k] = o * std::tanh(ct[k]);
        }
      }
    }
    if (y != nullptr) LastStep(g, hp, y);
  }
};

struct LstmGrad {
  static void Run(OpKernelContext* ctx, const LstmGeometry& g, const Tensor& dy, const Tensor& x,
                  const Tensor& kernel, const Tensor& recurrent, const Tensor& h, const Tensor& c,
                  const Tensor& gates, Tensor* dx, Tensor* dkernel, Tensor* drecurrent, Tensor* dbias) {
    const int64_t H = g.units, G = 4 * H, rows = g.batch * g.steps;
    Tensor dz_holder, carry_holder;
    float* dz = ZeroedFloats(ctx, rows * G, &dz_holder);  // pre-activation gradients, [B, T, 4H]
    float* carry = dz == nullptr ? nullptr : ZeroedFloats(ctx, 2 * g.batch * H, &carry_holder);
    if (carry == nullptr) return;
    float* dh_next = carry;               // [B, H]: dL/dh_t from step t + 1
    float* dc_next = carry + g.batch * H;  // [B, H]
    const float* dyp = dy.data<float>();
    const float* hp = h.data<float>();
    const float* cp = c.data<float>();
    const float* gp = gates.data<float>();
    const ConstMap u(recurrent.data<float>(), H, G);
    for (int64_t t = g.steps - 1; t >= 0; --t) {
      for (int64_t b = 0; b < g.batch; ++b) {
        const int64_t at = b * g.steps + t;
        const float* dyt = g.sequences ? dyp + at * H : (t == g.steps - 1 ? dyp + b * H : nullptr);
        const float* gt = gp + at * G;
        const float* ct = cp + at * H;
        const float* c_prev = t > 0 ? cp + (at - 1) * H : nullptr;
        float* dzt = dz + at * G;
        float* dhn = dh_next + b * H;
        float* dcn = dc_next + b * H;
        for (int64_t k = 0; k < H; ++k) {
          const float i = gt[k], f = gt[H + k], gg = gt[2 * H + k], o = gt[3 * H + k];
          const float dh = (dyt != nullptr ? dyt[k] : 0.0f) + dhn[k];
          const float tc = std::tanh(ct[k]);
          const float dc = dh * o * (1.0f - tc * tc) + dcn[k];
          dzt[k] = dc * gg * i * (1.0f - i);
          dzt[H + k] = (c_prev != nullptr ? dc * c_prev[k] : 0.0f) * f * (1.0f - f);
          dzt[2 * H + k] = dc * i * (1.0f - gg * gg);
          dzt[3 * H + k] = dh * tc * o * (1.0f - o);
          dcn[k] = dc * f;
        }
      }
      // dh_t-1 = dz_t recurrent_kernel^T.
      Map(dh_next, g.batch, H).noalias() = StepRows(static_cast<const float*>(dz), g, G, t) * u.transpose();
    }
    const ConstMap dzm(dz, rows, G);
    Map(dx->data<float>(), rows, g.features).noalias() =
        dzm * ConstMap(kernel.data<float>(), g.features, G).transpose();
    Map(dkernel->data<float>(), g.features, G).noalias() =
        ConstMap(x.data<float>(), rows, g.features).transpose() * dzm;
    Map dr(drecurrent->data<float>(), H, G);
    dr.setZero();
    for (int64_t t = 1; t < g.steps; ++t) {
      dr.noalias() += StepRows(hp, g, H, t - 1).transpose() * StepRows(static_cast<const float*>(dz), g, G, t);
    }
    Eigen::Map<Eigen::RowVectorXf>(dbias->data<float>(), G) = dzm.colwise().sum();
  }
};

// GRU (reset_after): the input side x kernel + bias[0] of every step in one
// GEMM into gates; each step's recurrent side u = h_t-1 recurrent_kernel +
// bias[1] into a [B, 3H] scratch, whose n block hn keeps.
struct Gru {
  static void Run(OpKernelContext* ctx, const LstmGeometry& g, const Tensor& x, const Tensor& kernel,
                  const Tensor& recurrent, const Tensor& bias, Tensor* h, Tensor* gates, Tensor* hn, Tensor* y) {
    const int64_t H = g.units, G = 3 * H, rows = g.batch * g.steps;
    Tensor u_holder;
    float* up = ZeroedFloats(ctx, g.batch * G, &u_holder);
    if (up == nullptr) return;
    float* zp = gates->data<float>();
    Map z(zp, rows, G);
    z.noalias() = ConstMap(x.data<float>(), rows, g.features) * ConstMap(kernel.data<float>(), g.features, G);
    z.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias.data<float>(), G);
    const Eigen::Map<const Eigen::RowVectorXf> rec_bias(bias.data<float>() + G, G);
    const ConstMap rk(recurrent.data<float>(), H, G);
    Map u(up, g.batch, G);
    float* hp = h->data<float>();
    float* np = hn->data<float>();
    for (int64_t t = 0; t < g.steps; ++t) {
      if (t > 0) {
        u.noalias() = StepRows(static_cast<const float*>(hp), g, H, t - 1) * rk;
      } else {
        u.setZero();
      }
      u.rowwise() += rec_bias;
      for (int64_t b = 0; b < g.batch; ++b) {
        const int64_t at = b * g.steps + t;
        float* gt = zp + at * G;
        const float* ub = up + b * G;
        const float* h_prev = t > 0 ? hp + (at - 1) * H : nullptr;
        for (int64_t k = 0; k < H; ++k) {
          const float zg = Sigmoid(gt[k] + ub[k]), r = Sigmoid(gt[H + k] + ub[H + k]);
          const float n = std::tanh(gt[2 * H + k] + r * ub[2 * H + k]);
          gt[k] = zg;
          gt[H + k] = r;
          gt[2 * H + k] = n;
          np[at * H + k] = ub[2 * H + k];
          hp[at * H + k] = (h_prev != nullptr ? zg * h_prev[k] : 0.0f) + (1.0f - zg) * n;
        }
      }
    }
    if (y != nullptr) LastStep(g, hp, y);
  }
};

// Walks the steps backwards with dh of the step after; dxg (the input
// side's pre-activation gradients) and drg (the recurrent side's: the n
// block scaled by r) collect every step's for the GEMMs after.
struct GruGrad {
  static void Run(OpKernelContext* ctx, const LstmGeometry& g, const Tensor& dy, const Tensor& x,
                  const Tensor& kernel, const Tensor& recurrent, const Tensor& h, const Tensor& gates,
                  const Tensor& hn, Tensor* dx, Tensor* dkernel, Tensor* drecurrent, Tensor* dbias) {
    const int64_t H = g.units, G = 3 * H, rows = g.batch * g.steps;
    Tensor holder;
    float* buf = ZeroedFloats(ctx, 2 * rows * G + g.batch * H, &holder);
    if (buf == nullptr) return;
    float* dxg = buf;
    float* drg = buf + rows * G;
    float* dh_next = drg + rows * G;  // [B, H]
    const float* dyp = dy.data<float>();
    const float* hp = h.data<float>();
    const float* gp = gates.data<float>();
    const float* np = hn.data<float>();
    const ConstMap rk(recurrent.data<float>(), H, G);
    for (int64_t t = g.steps - 1; t >= 0; --t) {
      for (int64_t b = 0; b < g.batch; ++b) {
        const int64_t at = b * g.steps + t;
        const float* dyt = g.sequences ? dyp + at * H : (t == g.steps - 1 ? dyp + b * H : nullptr);
        const float* gt = gp + at * G;
        const float* h_prev = t > 0 ? hp + (at - 1) * H : nullptr;
        float* dx_t = dxg + at * G;
        float* dr_t = drg + at * G;
        float* dhn = dh_next + b * H;
        for (int64_t k = 0; k < H; ++k) {
          const float zg = gt[k], r = gt[H + k], n = gt[2 * H + k];
          const float dh = (dyt != nullptr ? dyt[k] : 0.0f) + dhn[k];
          const float prev = h_prev != nullptr ? h_prev[k] : 0.0f;
          const float dn = dh * (1.0f - zg) * (1.0f - n * n);
          const float dz = dh * (prev - n) * zg * (1.0f - zg);
          const float dr = dn * np[at * H + k] * r * (1.0f - r);
          dx_t[k] = dr_t[k] = dz;
          dx_t[H + k] = dr_t[H + k] = dr;
          dx_t[2 * H + k] = dn;
          dr_t[2 * H + k] = dn * r;
          dhn[k] = dh * zg;  // the direct path; the recurrent one is added below
        }
      }
      Map(dh_next, g.batch, H).noalias() += StepRows(static_cast<const float*>(drg), g, G, t) * rk.transpose();
    }
    const ConstMap dxm(dxg, rows, G);
    Map(dx->data<float>(), rows, g.features).noalias() =
        dxm * ConstMap(kernel.data<float>(), g.features, G).transpose();
    Map(dkernel->data<float>(), g.features, G).noalias() =
        ConstMap(x.data<float>(), rows, g.features).transpose() * dxm;
    Map dr(drecurrent->data<float>(), H, G);
    dr.setZero();
    for (int64_t t = 1; t < g.steps; ++t) {
      dr.noalias() += StepRows(hp, g, H, t - 1).transpose() * StepRows(static_cast<const float*>(drg), g, G, t);
    }
    Eigen::Map<Eigen::RowVectorXf>(dbias->data<float>(), G) = dxm.colwise().sum();
    Eigen::Map<Eigen::RowVectorXf>(dbias->data<float>() + G, G) = ConstMap(drg, rows, G).colwise().sum();
  }
};

WEFT_REGISTER_KERNEL("GRU", "CPU", kernels::GruKernel<Gru>);
WEFT_REGISTER_KERNEL("GRUGrad", "CPU", kernels::GruGradKernel<GruGrad>);

WEFT_REGISTER_KERNEL("LSTM", "CPU", kernels::LstmKernel<Lstm>);
WEFT_REGISTER_KERNEL("LSTMGrad", "CPU", kernels::LstmGradKernel<LstmGrad>);

}  // namespace
}  // namespace cpu
}  // namespace weft
