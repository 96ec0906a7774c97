// MaxPool and MaxPoolGrad through cuDNN (cudnn_conv.h): descriptors per
// shape, made on first use and kept, so a warm step creates none.
#include <cudnn.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "runtime/kernels/cuda/cudnn_conv.h"
#include "runtime/kernels/cuda/cudnn_util.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"

namespace weft {
namespace gpu_kernels {
namespace {

using cudnn_util::FitsInt;
using cudnn_util::kOne;
using cudnn_util::kZero;
using cudnn_util::PoolingDesc;
using cudnn_util::ShapeCache;
using cudnn_util::TensorDesc;

std::atomic<int64_t> poolings{0};

struct PoolDescs {
  PoolingDesc pool;
  TensorDesc x;  // [n, h, w, c]
  TensorDesc y;  // [n, ho, wo, c]

  absl::Status Init(const kernels::PoolGeometry& g) {
    RETURN_IF_ERROR(pool.Init(g));
    RETURN_IF_ERROR(x.Init(g.n, g.h, g.w, g.c));
    RETURN_IF_ERROR(y.Init(g.n, g.ho, g.wo, g.c));
    // As for convolutions: cuDNN's output size must be weft's.
    int n = 0, c = 0, h = 0, w = 0;
    WEFT_CUDNN_RETURN_IF_ERROR(cudnnGetPooling2dForwardOutputDim(pool.get(), x.get(), &n, &c, &h, &w));
    if (n != g.n || c != g.c || h != g.ho || w != g.wo) {
      return absl::InternalError(absl::StrCat("cuDNN's max pooling output [", n, ",", h, ",", w, ",", c,
                                              "] differs from weft's ",
                                              TensorShape{g.n, g.ho, g.wo, g.c}.DebugString()));
    }
    return absl::OkStatus();
  }
};

// The pooling descriptors of g on this device, made on first use and kept.
absl::StatusOr<std::shared_ptr<const PoolDescs>> GetPoolDescs(OpKernelContext* ctx, const kernels::PoolGeometry& g) {
  // (ordinal, n, h, w, c, k, stride, pad_top, pad_left).
  using Key = std::array<int64_t, 9>;
  static auto* cache = new ShapeCache<Key, std::shared_ptr<const PoolDescs>>;
  const Key key = {Gpu(ctx)->ordinal(), g.n, g.h, g.w, g.c, g.k, g.stride, g.pad_top, g.pad_left};
  std::shared_ptr<const PoolDescs> descs;
  if (cache->Lookup(key, &descs)) return descs;
  auto d = std::make_shared<PoolDescs>();
  RETURN_IF_ERROR(d->Init(g));
  return cache->Insert(key, std::move(d));
}

}  // namespace

absl::Status CudnnMaxPool(OpKernelContext* ctx, const kernels::PoolGeometry& g, const float* x, float* y) {
  ASSIGN_OR_RETURN(std::shared_ptr<const PoolDescs> descs, GetPoolDescs(ctx, g));
  const PoolDescs& d = *descs;
  WEFT_CUDNN_RETURN_IF_ERROR(
      cudnnPoolingForward(Gpu(ctx)->cudnn(), d.pool.get(), &kOne, d.x.get(), x, &kZero, d.y.get(), y));
  poolings.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status CudnnMaxPoolGrad(OpKernelContext* ctx, const kernels::PoolGeometry& g, const float* x, const float* dy,
                              float* dx) {
  ASSIGN_OR_RETURN(std::shared_ptr<const PoolDescs> descs, GetPoolDescs(ctx, g));
  const PoolDescs& d = *descs;
  cudnnHandle_t handle = Gpu(ctx)->cudnn();
  ASSIGN_OR_RETURN(Tensor y, Scratch(ctx, g.n * g.ho * g.wo * g.c));
  WEFT_CUDNN_RETURN_IF_ERROR(
      cudnnPoolingForward(handle, d.pool.get(), &kOne, d.x.get(), x, &kZero, d.y.get(), y.data<float>()));
  // dy has y's shape, so it shares y's descriptor, and dx x's.
  WEFT_CUDNN_RETURN_IF_ERROR(cudnnPoolingBackward(handle, d.pool.get(), &kOne, d.y.get(), y.data<float>(),
                                                  d.y.get(), dy, d.x.get(), x, &kZero, d.x.get(), dx));
  poolings.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

bool CudnnCanPool(const kernels::PoolGeometry& g) {
  return g.HasSymmetricPadding() && FitsInt({g.n, g.h, g.w, g.c}) && FitsInt({g.n, g.ho, g.wo, g.c}) &&
         g.k <= INT_MAX && g.stride <= INT_MAX;
}

int64_t CudnnPoolingCount() { return poolings.load(std::memory_order_relaxed); }

}  // namespace gpu_kernels
}  // namespace weft
