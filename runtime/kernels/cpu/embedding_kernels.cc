// CPU kernels for Embedding and EmbeddingGrad. Every id is checked before
// any output is written, so a bad one fails the step with its position and
// value. The lookup copies rows, parallel over the ids. The gradient is a
// scatter-add, parallel over blocks of the table's columns: each block
// walks every id in order and adds in float, so the result does not depend
// on how the columns are split (or on the pool), and repeated ids add up in
// the order they appear. Checks and outputs are the shared skeleton's
// (runtime/kernels/embedding_kernels.h).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/synchronization/mutex.h"
#include "runtime/device.h"
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

 public:
  // Row of id i. REQUIRES: CheckIds accepted the ids.
  static int64_t RowAt(const Tensor& ids, int64_t i) { return Row(ids, i); }

 protected:
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

// EmbeddingGradRows: the distinct ids in order of first appearance and each
// one's sum of g's rows, added in position order from zero, as EmbeddingGrad
// adds them. A table row's slot among the distinct ids lives in a buffer of
// num_rows int32s that the kernel keeps (from the device's budgeted
// allocator, -1 between calls): a step touches only its ids' entries and
// resets them, so it costs O(ids), not O(rows), and allocates only its
// outputs and a scratch of one int32 per id.
class EmbeddingGradRowsOp : public OpKernel {
 public:
  explicit EmbeddingGradRowsOp(OpKernelConstruction* c) : OpKernel(c), ids_(c) {
    if (!GetAttr(c, GetIntAttr(c->def(), "num_rows"), &num_rows_)) return;
    if (num_rows_ < 0 || num_rows_ > INT32_MAX) {
      c->SetStatus(absl::InvalidArgumentError(absl::StrCat("num_rows must be in [0, 2^31), got ", num_rows_)));
    }
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& ids = ctx->input(0);
    const Tensor& grad = ctx->input(1);
    OP_REQUIRES_OK(ctx, kernels::CheckIdsOperand(ids));
    OP_REQUIRES_OK(ctx, kernels::ExpectDType(grad, DType::kFloat32, "g"));
    const int64_t width = grad.shape().rank() > 0 ? grad.shape().dim(grad.shape().rank() - 1) : 0;
    const bool row_per_id =
        grad.shape().rank() == ids.shape().rank() + 1 && grad.shape() == kernels::EmbeddingOutputShape(ids, width);
    OP_REQUIRES(ctx, row_per_id,
                absl::InvalidArgumentError(absl::StrCat("g ", grad.shape().DebugString(), " must be ids' shape ",
                                                        ids.shape().DebugString(), " and a row")));
    const int64_t n = ids.NumElements();
    OP_REQUIRES_OK(ctx, ids_.CheckIds(ctx, ids, num_rows_));
    absl::StatusOr<Tensor> order = ctx->allocate_temp(DType::kInt32, TensorShape{std::max<int64_t>(n, 1)});
    OP_REQUIRES_OK(ctx, order.status());
    int32_t* first = order->data<int32_t>();  // the distinct rows, in order
    absl::MutexLock lock(&mu_);
    if (!slots_.IsInitialized()) {
      absl::StatusOr<Tensor> slots =
          Tensor::Allocate(DType::kInt32, TensorShape{std::max<int64_t>(num_rows_, 1)}, ctx->device()->allocator());
      OP_REQUIRES_OK(ctx, slots.status());
      std::fill(slots->data<int32_t>(), slots->data<int32_t>() + slots->NumElements(), -1);
      slots_ = *std::move(slots);
    }
    int32_t* slot = slots_.data<int32_t>();
    int32_t distinct = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = IdRows::RowAt(ids, i);
      if (slot[row] < 0) {
        slot[row] = distinct;
        first[distinct++] = static_cast<int32_t>(row);
      }
    }
    // The slots are -1 again however the step ends.
    auto reset = absl::MakeCleanup([&] {
      for (int32_t u = 0; u < distinct; ++u) slot[first[u]] = -1;
    });
    Tensor* rows = ctx->allocate_output(0, DType::kInt32, TensorShape{distinct});
    Tensor* values = ctx->allocate_output(1, DType::kFloat32, TensorShape{distinct, width});
    if (rows == nullptr || values == nullptr) return;
    std::copy(first, first + distinct, rows->data<int32_t>());
    float* vp = values->data<float>();
    std::fill(vp, vp + values->NumElements(), 0.0f);
    const float* gp = grad.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      float* dst = vp + int64_t{slot[IdRows::RowAt(ids, i)]} * width;
      const float* src = gp + i * width;
      for (int64_t c = 0; c < width; ++c) dst[c] += src[c];
    }
  }

 private:
  IdRows ids_;
  int64_t num_rows_ = 0;
  absl::Mutex mu_;
  Tensor slots_ ABSL_GUARDED_BY(mu_);  // num_rows_ int32s, -1 between calls
};

// ScatterRows: zeros, then each row's values added at its index, every index
// checked first.
class ScatterRowsOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& rows = ctx->input(0);
    const Tensor& values = ctx->input(1);
    const Tensor& like = ctx->input(2);
    OP_REQUIRES_OK(ctx, kernels::ExpectDType(rows, DType::kInt32, "rows"));
    OP_REQUIRES_OK(ctx, kernels::ExpectRank(rows, 1, "rows"));
    OP_REQUIRES_OK(ctx, kernels::ExpectDType(values, DType::kFloat32, "values"));
    OP_REQUIRES_OK(ctx, kernels::ExpectRank(values, 2, "values [rows, width]"));
    OP_REQUIRES_OK(ctx, kernels::ExpectRank(like, 2, "like [rows, width]"));
    const int64_t n = rows.NumElements(), height = like.shape().dim(0), w = like.shape().dim(1);
    OP_REQUIRES(ctx, values.shape().dim(0) == n && values.shape().dim(1) == w,
                absl::InvalidArgumentError(absl::StrCat("values ", values.shape().DebugString(),
                                                        " must have a row per entry of rows ",
                                                        rows.shape().DebugString(), " and the width of ",
                                                        like.shape().DebugString())));
    const int32_t* r = rows.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      OP_REQUIRES(ctx, r[i] >= 0 && r[i] < height,
                  absl::InvalidArgumentError(absl::StrCat("rows[", i, "] is ", r[i], ", outside [0, ", height,
                                                          ") of ", like.shape().DebugString())));
    }
    Tensor* dense = ctx->allocate_output(0, DType::kFloat32, like.shape());
    if (dense == nullptr) return;
    float* dp = dense->data<float>();
    std::fill(dp, dp + dense->NumElements(), 0.0f);
    const float* vp = values.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      float* dst = dp + int64_t{r[i]} * w;
      for (int64_t c = 0; c < w; ++c) dst[c] += vp[i * w + c];
    }
  }
};

WEFT_REGISTER_KERNEL("Embedding", "CPU", kernels::EmbeddingKernel<Embedding>);
WEFT_REGISTER_KERNEL("EmbeddingGradRows", "CPU", EmbeddingGradRowsOp);
WEFT_REGISTER_KERNEL("ScatterRows", "CPU", ScatterRowsOp);
WEFT_REGISTER_KERNEL("EmbeddingGrad", "CPU", kernels::EmbeddingGradKernel<EmbeddingGrad>);

}  // namespace
}  // namespace cpu
}  // namespace weft
