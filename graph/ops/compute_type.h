// The precision a matrix product computes in (mixed precision,
// MixedPrecision in proto/job.proto): its operands are rounded to it and
// the products accumulate in float32; inputs and outputs stay float32.
// The attribute `compute_type` of MatMul: "float32" (the default),
// "float16" or "bfloat16".
#ifndef WEFT_GRAPH_OPS_COMPUTE_TYPE_H_
#define WEFT_GRAPH_OPS_COMPUTE_TYPE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "graph/attr.h"

namespace weft {

enum class ComputeType { kFloat32, kFloat16, kBFloat16 };

inline const char* ComputeTypeName(ComputeType t) {
  switch (t) {
    case ComputeType::kFloat16: return "float16";
    case ComputeType::kBFloat16: return "bfloat16";
    case ComputeType::kFloat32: break;
  }
  return "float32";
}

inline absl::StatusOr<ComputeType> ComputeTypeOf(const NodeDef& node) {
  absl::StatusOr<std::string> name = GetStringAttrOr(node, "compute_type", "float32");
  if (!name.ok()) return name.status();
  for (ComputeType t : {ComputeType::kFloat32, ComputeType::kFloat16, ComputeType::kBFloat16}) {
    if (*name == ComputeTypeName(t)) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("attr compute_type must be float32, float16 or bfloat16, got '", name->substr(0, 32), "'"));
}

}  // namespace weft

#endif  // WEFT_GRAPH_OPS_COMPUTE_TYPE_H_
