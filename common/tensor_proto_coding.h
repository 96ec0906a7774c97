// Conversion between Tensor and the TensorProto wire message.
//
// TensorProto is for constants, attributes, interactive feeds and fetches;
// bulk tensor traffic between daemons bypasses it (see worker/).
#ifndef WEFT_COMMON_TENSOR_PROTO_CODING_H_
#define WEFT_COMMON_TENSOR_PROTO_CODING_H_

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "proto/tensor.pb.h"

namespace weft {

// Validates dtype, shape (no negative dims, bounded element count) and that
// `content` holds exactly the payload's bytes.
absl::StatusOr<Tensor> TensorFromProto(const TensorProto& proto);
void TensorToProto(const Tensor& tensor, TensorProto* proto);

absl::StatusOr<TensorShape> ShapeFromProto(const TensorShapeProto& proto);
void ShapeToProto(const TensorShape& shape, TensorShapeProto* proto);

DataType DTypeToProto(DType dtype);
absl::StatusOr<DType> DTypeFromProto(int dtype);

}  // namespace weft

#endif  // WEFT_COMMON_TENSOR_PROTO_CODING_H_
