// CPU kernels for Reshape, ReshapeLike (both share the input's buffer) and
// Cast.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/ops/shape_util.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

class ReshapeOp : public OpKernel {
 public:
  explicit ReshapeOp(OpKernelConstruction* c) : OpKernel(c) {
    std::vector<int64_t> dims;
    if (!GetAttr(c, GetIntListAttr(c->def(), "shape"), &dims)) return;
    // The shape function's checks again (overflow included): a graph whose
    // inference was skipped reaches the kernel with the attr unchecked.
    absl::StatusOr<shape_util::ReshapeTarget> target = shape_util::ParseReshapeTarget(std::move(dims));
    if (!target.ok()) {
      c->SetStatus(target.status());
      return;
    }
    dims_ = std::move(target->dims);
    unknown_ = target->unknown;
    known_ = target->known;
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    TensorShape shape(dims_);
    const int64_t n = x.NumElements();
    if (unknown_ >= 0) {
      OP_REQUIRES(ctx, known_ != 0 && n % known_ == 0, Mismatch(x));
      shape.set_dim(unknown_, n / known_);
    } else {
      // known_ is the target's exact element count (checked at construction).
      OP_REQUIRES(ctx, known_ == n, Mismatch(x));
    }
    auto y = x.Reshaped(shape);
    OP_REQUIRES(ctx, y.ok(), Mismatch(x));
    ctx->set_output(0, *std::move(y));
  }

 private:
  absl::Status Mismatch(const Tensor& x) const {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", x.shape().DebugString(), " (",
                                                   x.NumElements(), " elements) to [", absl::StrJoin(dims_, ","),
                                                   "] (attribute 'shape')"));
  }

  std::vector<int64_t> dims_;
  int unknown_ = -1;
  int64_t known_ = 1;
};

class ReshapeLikeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& like = ctx->input(1);
    auto y = x.Reshaped(like.shape());
    OP_REQUIRES(ctx, y.ok(),
                absl::InvalidArgumentError(absl::StrCat("cannot reshape ", x.shape().DebugString(), " (",
                                                        x.NumElements(), " elements) like ",
                                                        like.shape().DebugString())));
    ctx->set_output(0, *std::move(y));
  }
};

// Float to integer saturates and maps NaN to 0 (a plain C++ cast would be
// undefined behaviour out of range).
template <typename To, typename From>
To Convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    if (std::isnan(v)) return 0;
    if (v <= static_cast<From>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (v >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

template <typename From, typename To>
void CastLoop(const Tensor& x, Tensor* y) {
  const From* in = x.data<From>();
  To* out = y->data<To>();
  for (int64_t i = 0, n = x.NumElements(); i < n; ++i) out[i] = Convert<To>(in[i]);
}

template <typename From>
bool CastFrom(const Tensor& x, Tensor* y) {
  switch (y->dtype()) {
    case DType::kFloat32: CastLoop<From, float>(x, y); return true;
    case DType::kInt32: CastLoop<From, int32_t>(x, y); return true;
    case DType::kInt64: CastLoop<From, int64_t>(x, y); return true;
    case DType::kBool: CastLoop<From, bool>(x, y); return true;
    default: return false;
  }
}

class CastOp : public OpKernel {
 public:
  explicit CastOp(OpKernelConstruction* c) : OpKernel(c) { GetAttr(c, GetTypeAttr(c->def(), "dtype"), &to_); }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    if (x.dtype() == to_) {
      ctx->set_output(0, x);
      return;
    }
    Tensor* y = ctx->allocate_output(0, to_, x.shape());
    if (y == nullptr) return;
    bool ok = false;
    switch (x.dtype()) {
      case DType::kFloat32: ok = CastFrom<float>(x, y); break;
      case DType::kInt32: ok = CastFrom<int32_t>(x, y); break;
      case DType::kInt64: ok = CastFrom<int64_t>(x, y); break;
      case DType::kBool: ok = CastFrom<bool>(x, y); break;
      default: break;
    }
    OP_REQUIRES(ctx, ok,
                absl::InvalidArgumentError(
                    absl::StrCat("cannot cast ", DTypeName(x.dtype()), " to ", DTypeName(to_))));
  }

 private:
  DType to_ = DType::kFloat32;
};

WEFT_REGISTER_KERNEL("Reshape", "CPU", ReshapeOp);
WEFT_REGISTER_KERNEL("ReshapeLike", "CPU", ReshapeLikeOp);
// Reshapes only change the shape a buffer is seen with, so they serve a GPU
// as they are.
WEFT_REGISTER_KERNEL("Reshape", "GPU", ReshapeOp);
WEFT_REGISTER_KERNEL("ReshapeLike", "GPU", ReshapeLikeOp);
WEFT_REGISTER_KERNEL("Cast", "CPU", CastOp);

}  // namespace
}  // namespace cpu
}  // namespace weft
