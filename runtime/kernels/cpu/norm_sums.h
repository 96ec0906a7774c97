// The per-channel sums that batch norm's backward passes share
// (norm_kernels.cc's BatchNormGrad, sync_norm_kernels.cc's
// BatchNormFromSumsGrad), over channel-last rows.
#ifndef WEFT_RUNTIME_KERNELS_CPU_NORM_SUMS_H_
#define WEFT_RUNTIME_KERNELS_CPU_NORM_SUMS_H_

#include <cstdint>

#include "runtime/kernels/norm_kernels.h"

namespace weft {
namespace cpu {

// sum_dy[c] += dy[r, c] and sum_dy_xhat[c] += dy[r, c] xhat[r, c] over the
// rows, xhat = (x - mean[c]) inv_std[c], accumulated in double.
inline void SumDyAndDyXhat(const kernels::NormGeometry& g, const float* __restrict dy, const float* __restrict x,
                           const float* mean, const float* inv_std, double* __restrict sum_dy,
                           double* __restrict sum_dy_xhat) {
  const int64_t nc = g.channels;
  for (int64_t r = 0; r < g.rows; ++r) {
    const float* dr = dy + r * nc;
    const float* xr = x + r * nc;
    for (int64_t c = 0; c < nc; ++c) {
      sum_dy[c] += dr[c];
      sum_dy_xhat[c] += static_cast<double>(dr[c]) * ((xr[c] - mean[c]) * inv_std[c]);
    }
  }
}

}  // namespace cpu
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_CPU_NORM_SUMS_H_
