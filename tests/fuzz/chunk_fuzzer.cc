// Fuzzes the decoding of one collective chunk from a peer's Exchange stream,
// delivered as a grpc::ByteBuffer of slices split as gRPC may split them.
// The decoded pieces must stay inside the slices the decoder owns: ASan
// checks that as the pieces are read here.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "tests/fuzz/fuzz_util.h"
#include "worker/collective/grpc_chunk_coding.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<grpc::Slice> slices;
  for (absl::string_view p : weft::fuzz::SplitPieces(data, size)) slices.emplace_back(p.data(), p.size());
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  auto got = weft::collective::DecodeChunk(&buffer);
  if (!got.ok()) return 0;
  // Touch every byte the pieces claim, and check they add up to no more
  // than the input.
  unsigned sum = 0;
  size_t total = 0;
  for (absl::string_view p : got->second.pieces) {
    for (char c : p) sum += static_cast<unsigned char>(c);
    total += p.size();
  }
  if (total > size) std::abort();
  return static_cast<int>(sum & 0);
}
