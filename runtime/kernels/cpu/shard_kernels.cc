// CPU kernels for ConcatRows and SliceRows (graph/ops/shard_ops.cc): row
// ranges of row-major tensors, so each is one memcpy per shard. Checks and
// the output are the shared skeletons' (runtime/kernels/shard_kernels.h).
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "runtime/kernels/cpu/kernel_util.h"
#include "runtime/kernels/shard_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace cpu {
namespace {

struct ConcatRows {
  static void Run(OpKernelContext* ctx, Tensor* out) {
    char* dst = static_cast<char*>(out->raw_data());
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& s = ctx->input(i);
      if (s.TotalBytes() > 0) std::memcpy(dst, s.raw_data(), s.TotalBytes());
      dst += s.TotalBytes();
    }
  }
};

struct SliceRows {
  static void Run(OpKernelContext*, const char* src, Tensor* out) {
    std::memcpy(out->raw_data(), src, out->TotalBytes());
  }
};

}  // namespace

WEFT_REGISTER_KERNEL("ConcatRows", "CPU", kernels::ConcatRowsKernel<ConcatRows>);
WEFT_REGISTER_KERNEL("SliceRows", "CPU", kernels::SliceRowsKernel<SliceRows>);
WEFT_REGISTER_KERNEL("MicroBatch", "CPU", kernels::MicroBatchKernel<SliceRows>);

}  // namespace cpu
}  // namespace weft
