// Element types of tensors and their C++ counterparts.
#ifndef WEFT_COMMON_DTYPE_H_
#define WEFT_COMMON_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace weft {

// Values match weft.DataType in proto/tensor.proto.
enum class DType : int {
  kInvalid = 0,
  kFloat32 = 1,
  kFloat16 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kBool = 5,
};

// IEEE 754 binary16, stored as its bit pattern. Conversions are exact for
// every half value and round-to-nearest-even from float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f);
  explicit operator float() const;
};

size_t DTypeSize(DType dtype);
absl::string_view DTypeName(DType dtype);           // "float32", "int64", ...
absl::StatusOr<DType> DTypeFromName(absl::string_view name);
bool IsValidDType(int value);

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<Half> { static constexpr DType value = DType::kFloat16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };

}  // namespace weft

#endif  // WEFT_COMMON_DTYPE_H_
