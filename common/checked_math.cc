#include "common/checked_math.h"

#include "absl/strings/str_cat.h"

namespace weft {

absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> dims, absl::string_view what) {
  int64_t n = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": dimension ", i, " is ", dims[i], ", must be >= 0"));
    }
    if (!CheckedMul(n, dims[i], &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the number of elements overflows 64 bits at dimension ", i, " (", dims[i], ")"));
    }
  }
  return n;
}

absl::StatusOr<size_t> CheckedByteSize(int64_t elements, size_t element_bytes, absl::string_view what) {
  if (elements < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": element count ", elements, " is negative"));
  }
  size_t bytes;
  if (!CheckedMul(static_cast<size_t>(elements), element_bytes, &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", elements, " elements of ", element_bytes, " bytes overflow the address space"));
  }
  return bytes;
}

absl::StatusOr<int64_t> CheckedDivide(int64_t numerator, int64_t denominator, absl::string_view what) {
  if (denominator <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": cannot divide by ", denominator));
  }
  return numerator / denominator;
}

}  // namespace weft
