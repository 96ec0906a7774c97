// The wire form of a RecvTensor reply, built so that the payload is never
// copied through a protobuf `bytes` field.
//
//   varint32 header_length | header | payload
//
// `header` is a serialized RecvTensorResponse whose tensor has dtype and shape
// but empty content; `payload` is the tensor's row-major buffer, exactly
// NumElements * sizeof(dtype) bytes. A dead tensor may come without a tensor.
//
// Sending: EncodeRecvTensorResponse returns a grpc::ByteBuffer of two slices,
// a small copy of the header and a slice that points into the tensor's own
// buffer and holds a reference to it until gRPC has written it out.
// Receiving: DecodeRecvTensorResponse copies the payload straight from the
// received slices (however gRPC split them) into a freshly allocated tensor:
// one copy, no intermediate string. Malformed input is DATA_LOSS with what was
// wrong, never a crash.
//
// Thread-safety: pure functions.
#ifndef WEFT_WORKER_GRPC_TENSOR_CODING_H_
#define WEFT_WORKER_GRPC_TENSOR_CODING_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/allocator.h"
#include "common/tensor.h"
#include "grpcpp/support/byte_buffer.h"

namespace weft {
namespace worker {

// Headers above this size are rejected as corrupt (a real one is ~100 bytes).
inline constexpr size_t kMaxRecvTensorHeaderBytes = 64 << 10;

struct ReceivedTensor {
  Tensor value;  // uninitialised for a dead tensor sent without a value
  bool is_dead = false;
  bool in_shm = false;  // the reply says the tensor went through shared memory
};

// The varint-prefixed header for `value`.
std::string EncodeRecvTensorHeader(const Tensor& value, bool is_dead);

// Header slice + payload slice pinning `value`'s buffer (no payload copy).
grpc::ByteBuffer EncodeRecvTensorResponse(const Tensor& value, bool is_dead);
// The reply whose tensor went through shared memory: a header with in_shm.
grpc::ByteBuffer EncodeInShmRecvTensorResponse();
// The varint-prefixed header of a failed request (a request that came
// through a shared-memory ring is answered there, errors too). The
// message is cut to kMaxRecvTensorErrorBytes. REQUIRES: !status.ok().
inline constexpr size_t kMaxRecvTensorErrorBytes = 4 << 10;
std::string EncodeRecvTensorError(const absl::Status& status);

// A reply that arrives as consecutive parts (a large one through shared
// memory, collective::SplitMessage): Begin with the first part (the header
// and the payload's first bytes), Add the others in order until complete.
// Each part's bytes are copied once, straight into the tensor. Payload
// beyond what the header's dtype and shape need is DATA_LOSS, and so is
// less when `more_parts` is false; a tensor over the process's memory
// budget is RESOURCE_EXHAUSTED before anything is allocated. A reply that
// carries the callee's error (EncodeRecvTensorError) makes Begin return
// that error; one whose code is not a status code is DATA_LOSS.
class RecvTensorAssembler {
 public:
  absl::Status Begin(absl::Span<const absl::string_view> pieces, bool more_parts,
                     Allocator* allocator = CpuAllocator());
  absl::Status Add(absl::Span<const absl::string_view> pieces);
  bool complete() const { return filled_ == total_; }
  size_t filled() const { return filled_; }
  // The DATA_LOSS for a payload of `got` bytes, not the tensor's size.
  absl::Status SizeMismatch(size_t got) const;
  // REQUIRES: complete().
  ReceivedTensor Take();

 private:
  ReceivedTensor out_;
  std::string what_;  // dtype and shape, for errors
  size_t total_ = 0;
  size_t filled_ = 0;
};

// Decodes a reply split into arbitrary pieces (the received slices).
absl::StatusOr<ReceivedTensor> DecodeRecvTensorResponse(absl::Span<const absl::string_view> pieces,
                                                        Allocator* allocator = CpuAllocator());
absl::StatusOr<ReceivedTensor> DecodeRecvTensorResponse(const grpc::ByteBuffer& buffer,
                                                        Allocator* allocator = CpuAllocator());

}  // namespace worker
}  // namespace weft

#endif  // WEFT_WORKER_GRPC_TENSOR_CODING_H_
