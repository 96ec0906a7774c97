// Geometry and input checks of the window ops, Conv2D with its backprops
// and MaxPool(Grad), shared by their CPU kernels (cpu/conv_kernels.cc,
// cpu/pool_kernels.cc) and GPU kernels (cuda/gpu_matmul_conv_kernels.cc,
// cuda/cudnn_conv.cc), so that a bad input gets the same error on
// either device and both devices pad the same way. Each check returns
// INVALID_ARGUMENT naming the operand at fault.
//
// Layouts: NHWC input, HWIO filter. Padding follows graph/ops/
// window_geometry.h (TensorFlow's SAME may pad one more row or column after
// than before).
//
// Thread-safety: pure functions.
#ifndef WEFT_RUNTIME_KERNELS_WINDOW_CHECKS_H_
#define WEFT_RUNTIME_KERNELS_WINDOW_CHECKS_H_

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "graph/ops/window_geometry.h"

namespace weft {
namespace kernels {

// A convolution of x [n, h, w, cin] with a filter [kh, kw, cin, cout].
struct ConvGeometry {
  int64_t n, h, w, cin;  // input
  int64_t kh, kw, cout;  // filter
  int64_t ho, wo;        // output
  int64_t pad_top, pad_bottom, pad_left, pad_right;
  int64_t stride;

  int64_t k() const { return kh * kw * cin; }  // patch length
  int64_t patches() const { return ho * wo; }  // patches per image
  // A 1x1, stride-1, unpadded convolution: a plain GEMM on the input.
  bool IsPointwise() const { return kh == 1 && kw == 1 && stride == 1 && pad_top == 0 && pad_left == 0; }
  bool HasSymmetricPadding() const { return pad_top == pad_bottom && pad_left == pad_right; }
  TensorShape OutputShape() const { return TensorShape{n, ho, wo, cout}; }
};

// The geometry of Conv2D(x, filter) with `p`'s stride and padding.
absl::StatusOr<ConvGeometry> ComputeConvGeometry(const Tensor& x, const Tensor& filter, const ConvParams& p);

// The backprops' incoming gradient must have the forward output's shape.
absl::Status CheckConvGradient(const ConvGeometry& g, const Tensor& grad);

// A square ksize x ksize max-pooling window over x [n, h, w, c].
struct PoolGeometry {
  int64_t n, h, w, c;  // input
  int64_t k, stride;   // window
  int64_t ho, wo;      // output
  int64_t pad_top, pad_bottom, pad_left, pad_right;

  bool HasSymmetricPadding() const { return pad_top == pad_bottom && pad_left == pad_right; }
  TensorShape OutputShape() const { return TensorShape{n, ho, wo, c}; }
  // The window of output (oh, ow), clipped to the input: rows [i0, i1),
  // cols [j0, j1). Padding is never part of a window.
  // Inline: the CPU kernels call it once per output position.
  void Window(int64_t oh, int64_t ow, int64_t* i0, int64_t* i1, int64_t* j0, int64_t* j1) const {
    const int64_t ih = oh * stride - pad_top, iw = ow * stride - pad_left;
    *i0 = std::max<int64_t>(ih, 0);
    *i1 = std::min<int64_t>(ih + k, h);
    *j0 = std::max<int64_t>(iw, 0);
    *j1 = std::min<int64_t>(iw + k, w);
  }
};

// The geometry of MaxPool(x) with `p`'s ksize, stride and padding.
absl::StatusOr<PoolGeometry> ComputePoolGeometry(const Tensor& x, const PoolParams& p);

// MaxPoolGrad(x, y, grad): y and grad must have the pooling output's shape.
absl::Status CheckPoolGradInputs(const PoolGeometry& g, const Tensor& y, const Tensor& grad);

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_RUNTIME_KERNELS_WINDOW_CHECKS_H_
