// CPU kernels for Embedding and EmbeddingGrad. Every id is checked before
// any output is written, so a bad one fails the step with its position and
// value. The lookup copies rows, parallel over the ids. The gradient is a
// scatter-add, parallel over blocks of the table's columns: each block
// walks every id in order and adds in float, so the result does not depend
// on how the columns are split (or on the pool), and repeated ids add up in
// the order they appear. Checks and outputs are the shared skeleton's
// (runtime/kernels/embedding_kernels.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/embedding_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

using kernels::EmbeddingGeometry;

// Row `v` names, or -1 when it names none.
int64_t RowOf(float v, int64_t rows) {
  if (!(v >= 0.0f) || std::floor(v) != v || static_cast<double>(v) >= static_cast<double>(rows)) return -1;
  return static_cast<int64_t>(v);
}
int64_t RowOf(int32_t v, int64_t rows) { return v >= 0 && v < rows ? v : -1; }

template <typename T>
absl::Status CheckRows(const Tensor& ids, int64_t rows) {
  const T* p = ids.data<T>();
  for (int64_t i = 0, n = ids.NumElements(); i < n; ++i) {
    if (RowOf(p[i], rows) < 0) {
      return kernels::BadIdError(kernels::IdPosition(ids.shape(), i), static_cast<double>(p[i]), ids.dtype(), rows);
    }
  }
  return absl::OkStatus();
}

// The ids as rows, checked before Run (which may then trust them).
class IdRows {
 public:
  explicit IdRows(OpKernelConstruction*) {}

  absl::Status CheckIds(OpKernelContext*, const Tensor& ids, int64_t rows) const {
    return ids.dtype() == DType::kInt32 ? CheckRows<int32_t>(ids, rows) : CheckRows<float>(ids, rows);
  }

 protected:
  // Row of id i. REQUIRES: CheckIds accepted the ids.
  static int64_t Row(const Tensor& ids, int64_t i) {
    return ids.dtype() == DType::kInt32 ? ids.data<int32_t>()[i] : static_cast<int64_t>(ids.data<float>()[i]);
  }
};

class Embedding : public IdRows {
 public:
  using IdRows::IdRows;
  void Run(OpKernelContext* ctx, const EmbeddingGeometry& g, const Tensor& params, const Tensor& ids,
           Tensor* out) const {
    const int64_t w = g.width;
    const float* pp = params.data<float>();
    float* op = out->data<float>();
    ParallelFor(ctx, g.ids, 1.0 * w, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) std::memcpy(op + i * w, pp + Row(ids, i) * w, w * sizeof(float));
    });
  }
};

class EmbeddingGrad : public IdRows {
 public:
  using IdRows::IdRows;
  void Run(OpKernelContext* ctx, const EmbeddingGeometry& g, const Tensor& ids, const Tensor& grad,
           Tensor* dparams) const {
    const int64_t w = g.width;
    const float* gp = grad.data<float>();
    float* dp = dparams->data<float>();
    std::fill(dp, dp + dparams->NumElements(), 0.0f);
    ParallelFor(ctx, w, 1.0 * g.ids, [&](int64_t begin, int64_t end) {
      const int64_t n = end - begin;
      for (int64_t i = 0; i < g.ids; ++i) {
        const float* src = gp + i * w + begin;
        float* dst = dp + Row(ids, i) * w + begin;
        for (int64_t c = 0; c < n; ++c) dst[c] += src[c];
      }
    });
  }
};

WEFT_REGISTER_KERNEL("Embedding", "CPU", kernels::EmbeddingKernel<Embedding>);
WEFT_REGISTER_KERNEL("EmbeddingGrad", "CPU", kernels::EmbeddingGradKernel<EmbeddingGrad>);

}  // namespace
}  // namespace cpu
}  // namespace weft
