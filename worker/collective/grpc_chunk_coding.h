// The wire form of one collective chunk on a CollectiveService.Exchange
// stream, built so that the payload is never copied on either side:
//
//   varint32 header_length | ChunkHeader | payload
//
// Sending: EncodeChunk returns a grpc::ByteBuffer of two slices, a small
// header and a slice that points into the tensor's own buffer and holds a
// reference to it until gRPC has written it out (as worker/grpc_tensor_coding.h
// does for RecvTensor).
// Receiving: DecodeChunk takes the received slices (however gRPC split them)
// and returns the key and a ReceivedChunk whose pieces are views into those
// slices, which it owns: the reduction reads straight from them. Malformed
// input is DATA_LOSS with what was wrong, never a crash.
//
// Thread-safety: pure functions.
#ifndef WEFT_WORKER_COLLECTIVE_GRPC_CHUNK_CODING_H_
#define WEFT_WORKER_COLLECTIVE_GRPC_CHUNK_CODING_H_

#include <utility>

#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"
#include "worker/collective/collective_transport.h"
#include "worker/collective/collective_types.h"

namespace weft {
namespace collective {

// Headers above this size are rejected as corrupt (a real one is ~30 bytes).
inline constexpr size_t kMaxChunkHeaderBytes = 1024;

grpc::ByteBuffer EncodeChunk(const ChunkKey& key, SendChunk chunk);

// Consumes `buffer`.
absl::StatusOr<std::pair<ChunkKey, ReceivedChunk>> DecodeChunk(grpc::ByteBuffer* buffer);

}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_GRPC_CHUNK_CODING_H_
