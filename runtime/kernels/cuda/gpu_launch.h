// Launchers for weft's CUDA kernels: a plain C++ API over the .cu files, so
// that nvcc compiles nothing but CUDA and the OpKernel classes (gpu_*.cc)
// build with the normal toolchain.
//
// Every launcher enqueues on `stream` and returns cudaGetLastError() of the
// launch; none synchronises or allocates. Pointers are device pointers unless
// a comment says otherwise; element counts may be 0 (nothing is launched,
// except where a launcher must still write a scalar). The semantics of each
// mirror the CPU kernel of the same op (runtime/kernels/cpu), including the
// order of floating-point operations where that is cheap to keep.
//
// Thread-safety: thread-safe (each call only enqueues work).
#ifndef WEFT_RUNTIME_KERNELS_CUDA_GPU_LAUNCH_H_
#define WEFT_RUNTIME_KERNELS_CUDA_GPU_LAUNCH_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "graph/ops/lr_schedule.h"

namespace weft {
namespace gpu_kernels {

// ---- convert.cu -----------------------------------------------------------------

// ya[i] = a[i] and yb[i] = b[i] rounded to nearest even in float16
// (bfloat16 when `bfloat16`), in one launch; ya and yb hold na and nb 2-byte
// elements.
cudaError_t LaunchToHalfPair(const float* a, void* ya, int64_t na, const float* b, void* yb, int64_t nb,
                             bool bfloat16, cudaStream_t stream);
// y[i] = x[i] widened from float16; x holds n 2-byte elements.
cudaError_t LaunchFloat16ToFloat(const void* x, float* y, int64_t n, cudaStream_t stream);

// ---- elementwise.cu ------------------------------------------------------------

enum class UnaryFn { kRelu, kSigmoid, kTanh, kNeg };
cudaError_t LaunchUnary(UnaryFn fn, const float* x, float* y, int64_t n, cudaStream_t stream);

// out = a (op) b, b broadcast when b_scalar.
enum class BinaryFn { kAdd, kSub, kMul, kReluGrad /*(g, x)*/, kSigmoidGrad /*(y, g)*/, kTanhGrad /*(y, g)*/ };
cudaError_t LaunchBinary(BinaryFn fn, const float* a, const float* b, bool b_scalar, float* out, int64_t n,
                         cudaStream_t stream);

// out[i, j] = x[i, j] + bias[j] over `rows` rows of `cols`.
cudaError_t LaunchBiasAdd(const float* x, const float* bias, float* out, int64_t rows, int64_t cols,
                          cudaStream_t stream);

// out = in[0] + in[1] + ... + in[count - 1], summed left to right per element;
// accumulate: out += (the same sum). count <= kAddNMaxInputs.
constexpr int kAddNMaxInputs = 16;
cudaError_t LaunchAddN(const float* const* in, int count, bool accumulate, float* out, int64_t n,
                       cudaStream_t stream);

// out[i, j] = m[i, j] * s[i].
cudaError_t LaunchScaleRows(const float* m, const float* s, float* out, int64_t rows, int64_t cols,
                            cudaStream_t stream);

// out[i] = g[0] * scale for i < n (SumGrad, MeanGrad), with scale applied as
// the CPU does: v = g; if (divide) v /= n.
cudaError_t LaunchFillFromScalar(const float* g, bool divide_by_n, float* out, int64_t n, cudaStream_t stream);

// Dtype codes for Cast and Equal: weft's DType values.
enum class ElemType { kFloat32 = 1, kInt32 = 3, kInt64 = 4, kBool = 5 };
// false when the pair is not supported (nothing is launched).
bool CastSupported(ElemType from, ElemType to);
cudaError_t LaunchCast(ElemType from, ElemType to, const void* x, void* y, int64_t n, cudaStream_t stream);
cudaError_t LaunchEqual(ElemType type, const void* x, const void* y, bool* out, int64_t n, cudaStream_t stream);

// The CPU Dropout's counter-based generator, element for element: the same
// key gives the same mask.
cudaError_t LaunchDropout(const float* x, float* y, float* mask, int64_t n, uint64_t key, uint32_t threshold,
                          float scale, cudaStream_t stream);
// The same, with the key made on the device from the step id at `step`
// (DropoutParams::StepKey's arithmetic): a launch recorded in a CUDA graph
// draws each replayed step's own mask.
cudaError_t LaunchDropoutAtStep(const float* x, float* y, float* mask, int64_t n, const int64_t* step, uint64_t seed,
                                uint64_t name_hash, uint32_t threshold, float scale, cudaStream_t stream);

// ---- reduce.cu ---------------------------------------------------------------------

// out[0] = sum(x) (mean: / n; NaN for n == 0). One block; always launches.
cudaError_t LaunchReduceAll(const float* x, int64_t n, bool mean, float* out, cudaStream_t stream);

// Column sums of g [rows, cols]. `partial` is scratch of
// BiasAddGradScratchFloats(rows, cols) floats (may be null when that is 0).
int64_t BiasAddGradScratchFloats(int64_t rows, int64_t cols);
cudaError_t LaunchBiasAddGrad(const float* g, int64_t rows, int64_t cols, float* partial, float* out,
                              cudaStream_t stream);

// out[i] = dot(x[i, :], y[i, :]).
cudaError_t LaunchRowDot(const float* x, const float* y, float* out, int64_t rows, int64_t cols,
                         cudaStream_t stream);

// out[i] = index of the first maximum of row i (cols > 0).
cudaError_t LaunchArgMax(const float* x, int32_t* out, int64_t rows, int64_t cols, cudaStream_t stream);

cudaError_t LaunchSoftmax(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);
// out = (g - dot(y, g)) * y per row.
cudaError_t LaunchSoftmaxGrad(const float* y, const float* g, float* out, int64_t rows, int64_t cols,
                              cudaStream_t stream);

// Loss and backprop of the sparse softmax cross-entropy. A label outside
// [0, cols) makes that row's loss and backprop NaN and records the first such
// (row, label) in `error`, host-mapped memory of 4 int32: error[0] becomes 2
// once error[1] (row), error[2] (label) and error[3] (cols) are visible.
// error may be null.
cudaError_t LaunchSparseXent(const float* logits, const int32_t* labels, float* loss, float* backprop,
                             int64_t rows, int64_t cols, int32_t* error, cudaStream_t stream);

// ---- training.cu ---------------------------------------------------------------------

// Each update's rate is `rate` (the schedule, graph/ops/lr_schedule.h) at
// t + 1, where t (count.t, a device scalar; null for rate.learning_rate) is
// read by every block and incremented once, by the last block to read it;
// count.ticket is a device counter that must be 0 on entry and is 0 again on
// exit (one per kernel object, launches on one stream). So no update reads
// device memory on the host. With `guard` (skip_nonfinite: the gradient's
// element 0), a launch whose *guard is not finite changes nothing, t
// included.
struct UpdateCount {
  float* t = nullptr;
  unsigned int* ticket = nullptr;
  const float* guard = nullptr;
};
// var -= lr (grad + weight_decay var)
cudaError_t LaunchApplyGradientDescent(float* var, const float* grad, const LrSchedule& rate, float weight_decay,
                                       UpdateCount count, int64_t n, cudaStream_t stream);
// g = grad + weight_decay var; accum = momentum accum + g; var -= lr accum
// (Nesterov: var -= lr (g + momentum accum)).
cudaError_t LaunchApplyMomentum(float* var, float* accum, const float* grad, const LrSchedule& rate,
                                float weight_decay, float momentum, bool nesterov, UpdateCount count, int64_t n,
                                cudaStream_t stream);
// Adam, with AdamW's decoupled weight decay; count.t is required.
cudaError_t LaunchApplyAdam(float* var, float* m, float* v, const float* grad, const LrSchedule& rate,
                            float weight_decay, float beta1, float beta2, float epsilon, UpdateCount count, int64_t n,
                            cudaStream_t stream);
// GlobalNormScale: LaunchSumSquares adds the sum of x's squares to *acc
// (a device double, 0 before the first tensor of a step); LaunchNormScale
// then writes norm = sqrt(*acc) and scale = clip_norm / max(norm, clip_norm)
// (NaN for a non-finite norm, as on the CPU) and zeroes *acc again.
cudaError_t LaunchSumSquares(const float* x, int64_t n, double* acc, cudaStream_t stream);
cudaError_t LaunchNormScale(double* acc, float clip_norm, float* scale, float* norm, cudaStream_t stream);
// var = momentum var + (1 - momentum) value.
cudaError_t LaunchApplyMovingAverage(float* var, const float* value, float momentum, int64_t n, cudaStream_t stream);
// Loss scaling (graph/ops/loss_scale_ops.cc), a table of up to
// kUnscaleTable gradients per launch (passed by value). LaunchUnscale writes
// out[t] = g[t] * (1 / *scale) and sets *overflow_flag (a device int, 0
// before a step's first table) when any g[t] has an element that is not
// finite. LaunchMarkOverflow then writes NaN to out[t][0] of each non-empty
// output when the flag is set, and with `finish` (the step's last table)
// writes overflow (NaN or 0) and zeroes the flag.
constexpr int kUnscaleTable = 64;
struct UnscaleTable {
  const float* g[kUnscaleTable];
  float* out[kUnscaleTable];
  int64_t n[kUnscaleTable];
  int count = 0;
};
cudaError_t LaunchUnscale(const UnscaleTable& table, const float* scale, int* overflow_flag, cudaStream_t stream);
cudaError_t LaunchMarkOverflow(const UnscaleTable& table, int* overflow_flag, bool finish, float* overflow,
                               cudaStream_t stream);
// ApplyLossScale on the device scalars scale and good_steps.
cudaError_t LaunchApplyLossScale(float* scale, float* good_steps, const float* overflow, float growth_interval,
                                 cudaStream_t stream);

// ---- norm.cu ------------------------------------------------------------------------

// x is `rows` rows of `channels` contiguous floats (channel-last); every
// statistic is per channel, over the rows, summed in double as on the CPU.
// `scratch` holds BatchNormScratchFloats(rows, channels) floats (may be null
// when that is 0), for the per-chunk partial sums of a large batch.
int64_t BatchNormScratchFloats(int64_t rows, int64_t channels);

// Training mode: mean, the unbiased variance (biased for one row), inv_std =
// 1 / sqrt(biased variance + epsilon) and y = (x - mean) inv_std gamma + beta.
cudaError_t LaunchBatchNorm(const float* x, const float* gamma, const float* beta, int64_t rows, int64_t channels,
                            float epsilon, float* scratch, float* y, float* mean, float* variance, float* inv_std,
                            cudaStream_t stream);
// dbeta = sum dy, dgamma = sum dy xhat, xhat = (x - mean) inv_std, and
// dx = gamma inv_std (dy - dbeta / rows - xhat dgamma / rows); rows == 0
// zeroes dgamma and dbeta.
cudaError_t LaunchBatchNormGrad(const float* dy, const float* x, const float* gamma, const float* mean,
                                const float* inv_std, int64_t rows, int64_t channels, float* scratch, float* dx,
                                float* dgamma, float* dbeta, cudaStream_t stream);
// y = (x - mean) / sqrt(variance + epsilon) gamma + beta.
cudaError_t LaunchBatchNormInference(const float* x, const float* gamma, const float* beta, const float* mean,
                                     const float* variance, int64_t rows, int64_t channels, float epsilon, float* y,
                                     cudaStream_t stream);

// out[i, c] = the mean of x[i, p, c] over the hw positions p (hw > 0).
cudaError_t LaunchGlobalAvgPool(const float* x, int64_t n, int64_t hw, int64_t channels, float* out,
                                cudaStream_t stream);
// dx[i, p, c] = g[i, c] / hw.
cudaError_t LaunchGlobalAvgPoolGrad(const float* g, int64_t n, int64_t hw, int64_t channels, float* dx,
                                    cudaStream_t stream);

// ---- sync_norm.cu -------------------------------------------------------------------

// Synchronised batch norm on norm.cu's layout (x is `rows` rows of
// `channels`, every statistic per channel). `count`, the global batch's
// rows, is a device scalar; below 1 or not finite it makes the statistics
// (and dsum, dsum_squares) NaN, as nothing here reads it on the host.
// `scratch` holds BatchNormSumsScratchFloats(rows, channels) floats (may be
// null when that is 0), for the per-chunk partial sums of a large batch;
// the sums are deterministic (no atomics).
int64_t BatchNormSumsScratchFloats(int64_t rows, int64_t channels);

// sum and sum_squares of x, accumulated in double, and *count = rows (no
// rows: zeros).
cudaError_t LaunchBatchNormSums(const float* x, int64_t rows, int64_t channels, float* scratch, float* sum,
                                float* sum_squares, float* count, cudaStream_t stream);
// dx = g_sum + 2 x g_sum_squares.
cudaError_t LaunchBatchNormSumsGrad(const float* x, const float* g_sum, const float* g_sum_squares, int64_t rows,
                                    int64_t channels, float* dx, cudaStream_t stream);
// With n = *count: mean = sum / n, biased = max(sum_squares / n - mean^2, 0),
// variance = biased n / (n - 1) (biased for n <= 1), inv_std = 1 / sqrt(biased
// + epsilon), in double; y = x scale + shift with scale = gamma inv_std and
// shift = beta - mean scale. The statistics are written even for no rows.
cudaError_t LaunchBatchNormFromSums(const float* x, const float* gamma, const float* beta, const float* sum,
                                    const float* sum_squares, const float* count, int64_t rows, int64_t channels,
                                    float epsilon, float* y, float* mean, float* variance, float* inv_std,
                                    cudaStream_t stream);
// dbeta = sum dy, dgamma = sum dy xhat (xhat = (x - mean) inv_std), in
// double; dsum = (dmean - 2 mean dvar) / n and dsum_squares = dvar / n with
// dmean = -gamma inv_std dbeta, dvar = -gamma inv_std^2 dgamma / 2; and
// dx = gamma inv_std dy. No rows: zero sums.
cudaError_t LaunchBatchNormFromSumsGrad(const float* dy, const float* x, const float* gamma, const float* mean,
                                        const float* inv_std, const float* count, int64_t rows, int64_t channels,
                                        float* scratch, float* dx, float* dgamma, float* dbeta, float* dsum,
                                        float* dsum_squares, cudaStream_t stream);

// ---- conv_pool.cu ------------------------------------------------------------------

// A 2-D window geometry on NHWC tensors.
struct WindowGeometry {
  int64_t n, h, w, c;     // input (c: channels of the input)
  int64_t kh, kw;         // window
  int64_t ho, wo;         // output
  int64_t pad_top, pad_left;
  int64_t stride;
};

// Patches of images [n0, n1) as rows [(n - n0) * ho * wo + oh * wo + ow] of
// length kh * kw * c, zero outside the input (the CPU's Im2Col).
cudaError_t LaunchIm2Col(const WindowGeometry& g, const float* x, int64_t n0, int64_t n1, float* cols,
                         cudaStream_t stream);
// dx of images [n0, n1) = the sum of the patch rows covering each element
// (the adjoint of Im2Col); writes every element of those images.
cudaError_t LaunchCol2Im(const WindowGeometry& g, const float* cols, int64_t n0, int64_t n1, float* dx,
                         cudaStream_t stream);

// MaxPool (kh == kw == ksize); padding never wins.
cudaError_t LaunchMaxPool(const WindowGeometry& g, const float* x, float* y, cudaStream_t stream);
// dx: each window's gradient goes to the first position, in row-major window
// order, holding its maximum (the CPU's rule), gathered per input element.
cudaError_t LaunchMaxPoolGrad(const WindowGeometry& g, const float* x, const float* grad, float* dx,
                              cudaStream_t stream);

// ---- avg_pool.cu -------------------------------------------------------------------

// AvgPool (kh == kw == ksize): each window's mean over its in-image positions.
cudaError_t LaunchAvgPool(const WindowGeometry& g, const float* x, float* y, cudaStream_t stream);
// dx: each window's gradient divided among its in-image positions, gathered
// per input element; writes every element.
cudaError_t LaunchAvgPoolGrad(const WindowGeometry& g, const float* grad, float* dx, cudaStream_t stream);

// ---- transpose.cu --------------------------------------------------------------------

// out [cols, rows] = in [rows, cols]^T, both row-major. A filter
// [KH, KW, Cin, Cout] (HWIO) with rows = KH * KW * Cin, cols = Cout becomes
// [Cout, KH, KW, Cin] (OHWI), and back with rows and cols swapped.
cudaError_t LaunchTranspose(const float* in, float* out, int64_t rows, int64_t cols, cudaStream_t stream);

// ---- layer_norm.cu ---------------------------------------------------------------------

// x is `rows` rows of `channels` contiguous floats (channel-last); every
// statistic is per row, over its channels, summed in double as on the CPU.

// mean and inv_std = 1 / sqrt(biased variance + epsilon) per row, y = (x -
// mean) inv_std gamma + beta.
cudaError_t LaunchLayerNorm(const float* x, const float* gamma, const float* beta, int64_t rows, int64_t channels,
                            float epsilon, float* y, float* mean, float* inv_std, cudaStream_t stream);
// `scratch` holds LayerNormGradScratchFloats(rows, channels) floats (may be
// null when that is 0), for the per-chunk partial sums of many rows.
int64_t LayerNormGradScratchFloats(int64_t rows, int64_t channels);
// With xhat = (x - mean) inv_std and g = dy gamma: dbeta = the sum over rows
// of dy, dgamma = the sum over rows of dy xhat, and dx = inv_std (g -
// mean_row(g) - xhat mean_row(g xhat)); rows == 0 zeroes dgamma and dbeta.
cudaError_t LaunchLayerNormGrad(const float* dy, const float* x, const float* gamma, const float* mean,
                                const float* inv_std, int64_t rows, int64_t channels, float* scratch, float* dx,
                                float* dgamma, float* dbeta, cudaStream_t stream);

// ---- embedding.cu ----------------------------------------------------------------------

// `n` ids, float32 whole numbers or int32, naming rows of a [rows, width]
// table. A bad id (not a whole number in [0, rows)) is recorded, the first
// only, in host-mapped `error` [flag, position, value as a double's bits,
// rows] (flag 2 once recorded; may be null).

// out[p, :] = params[ids[p], :]; NaN for a bad id's row.
cudaError_t LaunchEmbedding(const float* params, const float* ids, int64_t n, int64_t rows, int64_t width,
                            float* out, int64_t* error, cudaStream_t stream);
cudaError_t LaunchEmbedding(const float* params, const int32_t* ids, int64_t n, int64_t rows, int64_t width,
                            float* out, int64_t* error, cudaStream_t stream);
// dparams [rows, width] = zeros plus g[p, :] added to row ids[p] for every
// p (atomicAdd: the order of repeated ids' sums varies); bad ids add nothing.
cudaError_t LaunchEmbeddingGrad(const float* ids, const float* g, int64_t n, int64_t rows, int64_t width,
                                float* dparams, int64_t* error, cudaStream_t stream);
cudaError_t LaunchEmbeddingGrad(const int32_t* ids, const float* g, int64_t n, int64_t rows, int64_t width,
                                float* dparams, int64_t* error, cudaStream_t stream);

// ---- attention.cu ----------------------------------------------------------------------

// `rows` rows of `seq` contiguous floats, row r being query r % seq of one
// (example, head): the row-wise steps between attention's cuBLAS products.

// In place: each row's scores times `scale`, then its softmax over keys
// [0, limit) (limit = r % seq + 1 when causal, else seq) taken about its
// maximum, and 0 past limit.
cudaError_t LaunchAttentionSoftmax(float* scores, int64_t rows, int64_t seq, bool causal, float scale,
                                   cudaStream_t stream);
// In place over dprobs: dS = probs (dprobs - rowsum(probs dprobs)) scale.
cudaError_t LaunchAttentionSoftmaxGrad(const float* probs, float* dprobs, int64_t rows, int64_t seq, float scale,
                                       cudaStream_t stream);

// ---- recurrent.cu ----------------------------------------------------------------------

// The LSTM's and GRU's elementwise steps between their cuBLAS products, on
// the layouts of runtime/kernels/recurrent_kernels.h: h, c and hn [batch,
// steps, units], z and the gates [batch, steps, 4 units] with the blocks i,
// f, g, o side by side (GRU: [batch, steps, 3 units], blocks z, r, n).

// z[r, j] = bias[j] for `rows` rows of `cols`.
cudaError_t LaunchLstmBiasRows(const float* bias, float* z, int64_t rows, int64_t cols, cudaStream_t stream);
// Step t, in place over its rows of z (pre-activations in, activated gates
// out: i, f, o sigmoid, g tanh); c_t = f c_t-1 + i g (c_-1 = 0) and h_t =
// o tanh(c_t).
cudaError_t LaunchLstmStep(float* z, float* c, float* h, int64_t batch, int64_t steps, int64_t units, int64_t t,
                           cudaStream_t stream);
// Backward step t: from dy (y's shape: [batch, steps, units] with sequences,
// else [batch, units], the last step's), dh_next and dc_next [batch, units]
// (dL/dh_t and dL/dc_t through step t + 1, zero for the last step), writes
// step t's rows of dz, the pre-activation gradients, and sets dc_next to
// dL/dc_t-1. dh_t-1 = dz_t recurrent_kernel^T is the caller's.
cudaError_t LaunchLstmStepGrad(const float* dy, bool sequences, const float* gates, const float* c,
                               const float* dh_next, float* dc_next, float* dz, int64_t batch, int64_t steps,
                               int64_t units, int64_t t, cudaStream_t stream);
// GRU step t (reset_after), in place over its rows of z (x kernel + bias[0]
// in; activated z, r, n out). u [batch, 3 units] is h_t-1 recurrent_kernel,
// not read at t = 0; with rec_bias (bias[1], 3 units) added it is the
// recurrent side, whose n block goes to hn. h_t = z h_t-1 + (1 - z) n.
cudaError_t LaunchGruStep(float* z, const float* u, const float* rec_bias, float* hn, float* h, int64_t batch,
                          int64_t steps, int64_t units, int64_t t, cudaStream_t stream);
// GRU backward step t: from dy (as LaunchLstmStepGrad's) and dh_next
// [batch, units] (dL/dh_t through step t + 1, zero for the last step),
// writes step t's rows of dxg and drg [batch, steps, 3 units] (the input
// and recurrent sides' pre-activation gradients) and sets dh_next to dh z,
// the direct path; the caller adds drg_t recurrent_kernel^T.
cudaError_t LaunchGruStepGrad(const float* dy, bool sequences, const float* gates, const float* h, const float* hn,
                              float* dh_next, float* dxg, float* drg, int64_t batch, int64_t steps, int64_t units,
                              int64_t t, cudaStream_t stream);

// ---- metric.cu -------------------------------------------------------------------------

// InTopK: *count = the number of rows whose label's logit is finite and has
// fewer than k logits of its row [rows, cols] strictly greater; a label
// outside [0, cols) is a miss.
cudaError_t LaunchInTopK(const float* logits, const int32_t* labels, int64_t rows, int64_t cols, int64_t k,
                         float* count, cudaStream_t stream);

}  // namespace gpu_kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_CUDA_GPU_LAUNCH_H_
