// The element-wise kernels of the collectives: sum received bytes into a
// tensor region, or copy them there, reading straight from the pieces the
// transport received (no staging copy). Pieces may split an element between
// them; such an element goes through a small carry buffer, the rest through
// a loop that the -O3 -march=x86-64-v3 build turns into AVX2 adds with
// unaligned loads.
//
// Thread-safety: pure functions.
#ifndef WEFT_WORKER_COLLECTIVE_REDUCE_H_
#define WEFT_WORKER_COLLECTIVE_REDUCE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/dtype.h"

namespace weft {
namespace collective {

// OK for the dtypes the collectives can sum (float32, float16, int32, int64;
// float16 sums are taken in float32 and rounded back);
// INVALID_ARGUMENT naming the dtype otherwise.
absl::Status CheckReducibleDType(DType dtype);

// dst[i] += source element i, for the `bytes / DTypeSize(dtype)` elements at
// `dst`. REQUIRES: CheckReducibleDType(dtype).ok(); the pieces hold exactly
// `bytes` bytes in all.
void SumInto(DType dtype, void* dst, size_t bytes, absl::Span<const absl::string_view> pieces);

// Copies the pieces, `bytes` in all, to `dst`.
void CopyInto(void* dst, size_t bytes, absl::Span<const absl::string_view> pieces);

}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_REDUCE_H_
