// Fuzzes the decoding of a RecvTensor reply (a peer's bytes), split into
// slices the way gRPC may deliver them. A reply that decodes must re-encode
// to a header the decoder accepts with the same tensor.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "tests/fuzz/fuzz_util.h"
#include "worker/grpc_tensor_coding.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto pieces = weft::fuzz::SplitPieces(data, size);
  absl::StatusOr<weft::worker::ReceivedTensor> got = weft::worker::DecodeRecvTensorResponse(pieces);
  if (!got.ok() || !got->value.IsInitialized()) return 0;
  const weft::Tensor& v = got->value;
  const std::string header = weft::worker::EncodeRecvTensorHeader(v, got->is_dead);
  const absl::string_view again[] = {
      header, absl::string_view(static_cast<const char*>(v.raw_data()), v.TotalBytes())};
  absl::StatusOr<weft::worker::ReceivedTensor> back = weft::worker::DecodeRecvTensorResponse(again);
  if (!back.ok() || back->is_dead != got->is_dead || back->value.TotalBytes() != v.TotalBytes() ||
      (v.TotalBytes() > 0 && std::memcmp(back->value.raw_data(), v.raw_data(), v.TotalBytes()) != 0)) {
    std::abort();
  }
  return 0;
}
