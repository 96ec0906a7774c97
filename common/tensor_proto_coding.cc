#include "common/tensor_proto_coding.h"

#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"

namespace weft {
namespace {
// 2^40 elements: far above any real tensor, low enough to keep byte counts in range.
constexpr int64_t kMaxElements = int64_t{1} << 40;
}  // namespace

DataType DTypeToProto(DType dtype) { return static_cast<DataType>(static_cast<int>(dtype)); }

absl::StatusOr<DType> DTypeFromProto(int dtype) {
  if (!IsValidDType(dtype)) return absl::InvalidArgumentError(absl::StrCat("invalid dtype ", dtype));
  return static_cast<DType>(dtype);
}

absl::StatusOr<TensorShape> ShapeFromProto(const TensorShapeProto& proto) {
  if (proto.unknown_rank()) return absl::InvalidArgumentError("shape has unknown rank");
  TensorShape shape;
  int64_t n = 1;
  for (int64_t d : proto.dim()) {
    if (d < -1) return absl::InvalidArgumentError(absl::StrCat("shape has invalid dimension ", d));
    shape.AddDim(d);
    if (d > 0) {
      if (n > kMaxElements / d) return absl::InvalidArgumentError("shape has too many elements");
      n *= d;
    }
  }
  return shape;
}

void ShapeToProto(const TensorShape& shape, TensorShapeProto* proto) {
  proto->Clear();
  for (int64_t d : shape.dims()) proto->add_dim(d);
}

absl::StatusOr<Tensor> TensorFromProto(const TensorProto& proto) {
  ASSIGN_OR_RETURN(DType dtype, DTypeFromProto(proto.dtype()));
  ASSIGN_OR_RETURN(TensorShape shape, ShapeFromProto(proto.shape()));
  if (!shape.IsFullyDefined()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor shape ", shape.DebugString(), " has unknown dimensions"));
  }
  const std::string what = absl::StrCat("tensor ", DTypeName(dtype), shape.DebugString());
  ASSIGN_OR_RETURN(int64_t elements, CheckedNumElements(shape.dims(), what));
  ASSIGN_OR_RETURN(size_t bytes, CheckedByteSize(elements, DTypeSize(dtype), what));
  if (proto.content().size() != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " needs ", bytes, " bytes of content, got ", proto.content().size()));
  }
  // Allocate, not the throwing constructor: the proto comes from a peer.
  ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(dtype, shape));
  if (bytes > 0) std::memcpy(t.raw_data(), proto.content().data(), bytes);
  if (dtype == DType::kBool) {  // normalise so that every byte is 0 or 1
    for (bool& b : t.flat<bool>()) b = reinterpret_cast<const uint8_t&>(b) != 0;
  }
  return t;
}

void TensorToProto(const Tensor& tensor, TensorProto* proto) {
  proto->set_dtype(DTypeToProto(tensor.dtype()));
  ShapeToProto(tensor.shape(), proto->mutable_shape());
  proto->set_content(tensor.raw_data(), tensor.TotalBytes());
}

}  // namespace weft
