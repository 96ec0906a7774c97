// Fuzzes TensorProto decoding (the form tensors take in feeds, fetches,
// attributes and checkpoints): a proto that decodes must encode back to the
// same dtype, shape and content.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "common/tensor_proto_coding.h"
#include "proto/tensor.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft::TensorProto proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;
  absl::StatusOr<weft::Tensor> t = weft::TensorFromProto(proto);
  if (!t.ok()) return 0;
  weft::TensorProto again;
  weft::TensorToProto(*t, &again);
  // Bool content is normalised to 0/1, so only its size must survive.
  if (again.dtype() != proto.dtype() || again.content().size() != proto.content().size()) std::abort();
  if (again.dtype() != weft::DT_BOOL && again.content() != proto.content()) std::abort();
  return 0;
}
