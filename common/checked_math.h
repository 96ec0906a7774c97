// Overflow-checked integer arithmetic for sizes that come from outside: a
// graph's attributes and shapes, a peer's message, a file's header.
//
// Every element count, byte count, offset and dimension product that a
// request can influence goes through these before anything is allocated or
// indexed, in the shape function and again in the kernel (a kernel can be
// reached by a graph whose inference was skipped). The bool forms are for
// hot paths and callers that build their own message; the Status forms name
// `what` (a node and attribute, a file and field) in the error.
#ifndef WEFT_COMMON_CHECKED_MATH_H_
#define WEFT_COMMON_CHECKED_MATH_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace weft {

// *out = a + b (a * b, a - b); false, with *out unspecified, when the exact
// result does not fit.
template <typename T>
inline bool CheckedAdd(T a, T b, T* out) {
  return !__builtin_add_overflow(a, b, out);
}
template <typename T>
inline bool CheckedSub(T a, T b, T* out) {
  return !__builtin_sub_overflow(a, b, out);
}
template <typename T>
inline bool CheckedMul(T a, T b, T* out) {
  return !__builtin_mul_overflow(a, b, out);
}

// The product of `dims` (1 for none). INVALID_ARGUMENT naming `what` when a
// dim is negative or the product exceeds INT64_MAX.
absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> dims, absl::string_view what);

// elements * element_bytes as a byte count; INVALID_ARGUMENT naming `what`
// when elements is negative or the product does not fit in size_t.
absl::StatusOr<size_t> CheckedByteSize(int64_t elements, size_t element_bytes, absl::string_view what);

// True when [begin, begin + size) lies inside [0, limit), computed without
// overflow; false for any negative argument.
inline bool RangeWithin(int64_t begin, int64_t size, int64_t limit) {
  if (begin < 0 || size < 0 || limit < 0) return false;
  int64_t end;
  return CheckedAdd(begin, size, &end) && end <= limit;
}

// numerator / denominator, INVALID_ARGUMENT naming `what` for a zero or
// negative denominator (a dimension divided into another).
absl::StatusOr<int64_t> CheckedDivide(int64_t numerator, int64_t denominator, absl::string_view what);

}  // namespace weft

#endif  // WEFT_COMMON_CHECKED_MATH_H_
