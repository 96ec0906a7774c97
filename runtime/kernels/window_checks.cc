#include "runtime/kernels/window_checks.h"

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"

namespace weft {
namespace kernels {
namespace {

absl::Status ExpectNhwc(const Tensor& x) {
  if (x.shape().rank() != 4) {
    return absl::InvalidArgumentError(absl::StrCat("x must have rank 4 (NHWC), got ", x.shape().DebugString()));
  }
  return absl::OkStatus();
}

// Sets g's output size and padding for a kh x kw window at g's stride.
template <typename Geometry>
absl::Status SetWindows(int64_t kh, int64_t kw, Padding padding, Geometry* g) {
  auto wh = ComputeWindow(g->h, kh, g->stride, padding, "input height");
  if (!wh.ok()) return wh.status();
  auto ww = ComputeWindow(g->w, kw, g->stride, padding, "input width");
  if (!ww.ok()) return ww.status();
  g->ho = wh->out;
  g->wo = ww->out;
  g->pad_top = wh->pad_before;
  g->pad_bottom = wh->pad_after;
  g->pad_left = ww->pad_before;
  g->pad_right = ww->pad_after;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ConvGeometry> ComputeConvGeometry(const Tensor& x, const Tensor& filter, const ConvParams& p) {
  if (absl::Status s = ExpectNhwc(x); !s.ok()) return s;
  const TensorShape& fs = filter.shape();
  if (fs.rank() != 4) {
    return absl::InvalidArgumentError(absl::StrCat("filter must have rank 4 (HWIO), got ", fs.DebugString()));
  }
  ConvGeometry g;
  g.n = x.shape().dim(0);
  g.h = x.shape().dim(1);
  g.w = x.shape().dim(2);
  g.cin = x.shape().dim(3);
  g.kh = fs.dim(0);
  g.kw = fs.dim(1);
  g.cout = fs.dim(3);
  g.stride = p.stride;
  if (fs.dim(2) != g.cin) {
    return absl::InvalidArgumentError(absl::StrCat("x ", x.shape().DebugString(), " has ", g.cin,
                                                   " channels but filter ", fs.DebugString(), " expects ",
                                                   fs.dim(2)));
  }
  if (g.kh < 1 || g.kw < 1) {
    return absl::InvalidArgumentError(absl::StrCat("filter ", fs.DebugString(), " has an empty window"));
  }
  if (absl::Status s = SetWindows(g.kh, g.kw, p.padding, &g); !s.ok()) return s;
  // x and filter were allocated, so each of their products fits; the im2col
  // sizes the kernels index with multiply one by the other.
  int64_t patches, cols, rows, out;
  if (!CheckedMul(g.ho, g.wo, &patches) || !CheckedMul(patches, g.k(), &cols) || !CheckedMul(g.n, cols, &rows) ||
      !CheckedMul(g.n * patches, g.cout, &out)) {
    return absl::InvalidArgumentError(absl::StrCat("x ", x.shape().DebugString(), " and filter ", fs.DebugString(),
                                                   ": the convolution's sizes overflow 64 bits"));
  }
  return g;
}

absl::Status CheckConvGradient(const ConvGeometry& g, const Tensor& grad) {
  if (grad.shape() != g.OutputShape()) {
    return absl::InvalidArgumentError(absl::StrCat("gradient ", grad.shape().DebugString(),
                                                   " does not match the convolution's output ",
                                                   g.OutputShape().DebugString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<PoolGeometry> ComputePoolGeometry(const Tensor& x, const PoolParams& p) {
  if (absl::Status s = ExpectNhwc(x); !s.ok()) return s;
  PoolGeometry g;
  g.n = x.shape().dim(0);
  g.h = x.shape().dim(1);
  g.w = x.shape().dim(2);
  g.c = x.shape().dim(3);
  g.k = p.ksize;
  g.stride = p.stride;
  if (absl::Status s = SetWindows(g.k, g.k, p.padding, &g); !s.ok()) return s;
  return g;
}

absl::Status CheckPoolGradInputs(const PoolGeometry& g, const Tensor& y, const Tensor& grad) {
  for (const Tensor* t : {&y, &grad}) {
    if (t->shape() != g.OutputShape()) {
      return absl::InvalidArgumentError(absl::StrCat(t == &y ? "y " : "gradient ", t->shape().DebugString(),
                                                     " does not match the pooling output ",
                                                     g.OutputShape().DebugString()));
    }
  }
  return absl::OkStatus();
}

}  // namespace kernels
}  // namespace weft
