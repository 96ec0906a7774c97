#include "worker/grpc_tensor_coding.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "common/tensor_proto_coding.h"
#include "google/protobuf/io/coded_stream.h"
#include "proto/worker_service.pb.h"

namespace weft {
namespace worker {
namespace {

void UnrefPinnedTensor(void* pinned) { delete static_cast<Tensor*>(pinned); }

// Reads bytes across pieces without copying until asked.
class PieceReader {
 public:
  explicit PieceReader(absl::Span<const absl::string_view> pieces) : pieces_(pieces) {}

  size_t remaining() const {
    size_t n = 0;
    for (size_t i = piece_; i < pieces_.size(); ++i) n += pieces_[i].size();
    return n - offset_;
  }
  // False when the input ends first.
  bool ReadByte(uint8_t* b) {
    SkipEmpty();
    if (piece_ == pieces_.size()) return false;
    *b = static_cast<uint8_t>(pieces_[piece_][offset_++]);
    return true;
  }
  // Copies exactly n bytes to `out`. REQUIRES: n <= remaining().
  void Copy(char* out, size_t n) {
    while (n > 0) {
      SkipEmpty();
      const size_t take = std::min(n, pieces_[piece_].size() - offset_);
      std::memcpy(out, pieces_[piece_].data() + offset_, take);
      out += take;
      offset_ += take;
      n -= take;
    }
  }

 private:
  void SkipEmpty() {
    while (piece_ < pieces_.size() && offset_ == pieces_[piece_].size()) {
      ++piece_;
      offset_ = 0;
    }
  }
  absl::Span<const absl::string_view> pieces_;
  size_t piece_ = 0;
  size_t offset_ = 0;
};

absl::Status Corrupt(absl::string_view why) {
  return absl::DataLossError(absl::StrCat("corrupt RecvTensor reply: ", why));
}

}  // namespace

namespace {

// varint32 length | serialized header.
std::string Framed(const RecvTensorResponse& header) {
  const std::string body = header.SerializeAsString();
  std::string out;
  out.resize(google::protobuf::io::CodedOutputStream::VarintSize32(static_cast<uint32_t>(body.size())));
  google::protobuf::io::CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(body.size()),
                                                              reinterpret_cast<uint8_t*>(&out[0]));
  out += body;
  return out;
}

}  // namespace

std::string EncodeRecvTensorHeader(const Tensor& value, bool is_dead) {
  RecvTensorResponse header;
  header.set_is_dead(is_dead);
  if (value.IsInitialized()) {
    header.mutable_tensor()->set_dtype(DTypeToProto(value.dtype()));
    ShapeToProto(value.shape(), header.mutable_tensor()->mutable_shape());
  }
  return Framed(header);
}

grpc::ByteBuffer EncodeRecvTensorResponse(const Tensor& value, bool is_dead) {
  grpc::Slice slices[2] = {grpc::Slice(EncodeRecvTensorHeader(value, is_dead)), grpc::Slice()};
  const size_t bytes = value.IsInitialized() ? value.TotalBytes() : 0;
  if (bytes == 0) return grpc::ByteBuffer(slices, 1);
  // The copy of `value` holds a reference to its buffer; gRPC drops the slice,
  // and with it the copy, once the bytes are on the wire.
  auto* pinned = new Tensor(value);
  slices[1] = grpc::Slice(const_cast<void*>(pinned->raw_data()), bytes, &UnrefPinnedTensor, pinned);
  return grpc::ByteBuffer(slices, 2);
}

grpc::ByteBuffer EncodeInShmRecvTensorResponse() {
  RecvTensorResponse header;
  header.set_in_shm(true);
  grpc::Slice slice(Framed(header));
  return grpc::ByteBuffer(&slice, 1);
}

std::string EncodeRecvTensorError(const absl::Status& status) {
  RecvTensorResponse header;
  header.set_error_code(static_cast<int32_t>(status.code()));
  header.set_error_message(std::string(status.message().substr(0, kMaxRecvTensorErrorBytes)));
  return Framed(header);
}

absl::Status RecvTensorAssembler::Begin(absl::Span<const absl::string_view> pieces, bool more_parts,
                                        Allocator* allocator) {
  PieceReader reader(pieces);
  uint32_t header_len = 0;
  for (int shift = 0;; shift += 7) {
    uint8_t b;
    if (shift > 28 || !reader.ReadByte(&b)) return Corrupt("truncated or overlong header length");
    header_len |= static_cast<uint32_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) break;
  }
  if (header_len > kMaxRecvTensorHeaderBytes) {
    return Corrupt(absl::StrCat("header length ", header_len, " exceeds ", kMaxRecvTensorHeaderBytes));
  }
  if (header_len > reader.remaining()) {
    return Corrupt(absl::StrCat("header of ", header_len, " bytes but only ", reader.remaining(), " follow"));
  }
  std::string header_bytes(header_len, '\0');
  reader.Copy(header_bytes.data(), header_len);
  RecvTensorResponse header;
  if (!header.ParseFromString(header_bytes)) return Corrupt("header does not parse");

  if (header.error_code() != 0 || !header.error_message().empty()) {
    const int32_t code = header.error_code();
    if (code <= 0 || code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated) ||
        header.has_tensor() || header.is_dead() || header.in_shm() || reader.remaining() != 0) {
      return Corrupt(absl::StrCat("an error reply (code ", code, ") that is not only an error"));
    }
    return absl::Status(static_cast<absl::StatusCode>(code), header.error_message());
  }

  if (header.in_shm()) {
    if (header.has_tensor() || header.is_dead() || reader.remaining() != 0) {
      return Corrupt("a reply sent through shared memory that carries a tensor too");
    }
    out_.in_shm = true;
    return absl::OkStatus();
  }
  if (!header.has_tensor()) {
    if (!header.is_dead()) return Corrupt("a live tensor without dtype and shape");
    if (reader.remaining() != 0) return Corrupt("payload after a dead tensor without a value");
    out_.is_dead = true;
    return absl::OkStatus();
  }
  auto dtype = DTypeFromProto(header.tensor().dtype());
  if (!dtype.ok()) return Corrupt(dtype.status().message());
  auto shape = ShapeFromProto(header.tensor().shape());
  if (!shape.ok()) return Corrupt(shape.status().message());
  if (!shape->IsFullyDefined()) return Corrupt(absl::StrCat("shape ", shape->DebugString(), " is not concrete"));
  if (!header.tensor().content().empty()) return Corrupt("payload inside the header");
  what_ = absl::StrCat(DTypeName(*dtype), shape->DebugString());
  absl::StatusOr<int64_t> elements = CheckedNumElements(shape->dims(), what_);
  if (!elements.ok()) return Corrupt(elements.status().message());
  absl::StatusOr<size_t> total = CheckedByteSize(*elements, DTypeSize(*dtype), what_);
  if (!total.ok()) return Corrupt(total.status().message());
  total_ = *total;
  if (reader.remaining() > total_ || (!more_parts && reader.remaining() != total_)) {
    return SizeMismatch(reader.remaining());
  }
  absl::StatusOr<Tensor> value = Tensor::Allocate(*dtype, *shape, allocator);
  if (!value.ok()) return value.status();
  out_.value = std::move(*value);
  out_.is_dead = header.is_dead();
  filled_ = reader.remaining();
  reader.Copy(static_cast<char*>(out_.value.raw_data()), filled_);
  return absl::OkStatus();
}

absl::Status RecvTensorAssembler::Add(absl::Span<const absl::string_view> pieces) {
  PieceReader reader(pieces);
  const size_t n = reader.remaining();
  if (n > total_ - filled_) return SizeMismatch(filled_ + n);
  reader.Copy(static_cast<char*>(out_.value.raw_data()) + filled_, n);
  filled_ += n;
  return absl::OkStatus();
}

absl::Status RecvTensorAssembler::SizeMismatch(size_t got) const {
  return Corrupt(absl::StrCat(what_, " needs ", total_, " payload bytes, got ", got));
}

ReceivedTensor RecvTensorAssembler::Take() {
  if (out_.value.IsInitialized() && out_.value.dtype() == DType::kBool) {
    // A peer's garbage must not become an invalid bool.
    for (bool& b : out_.value.flat<bool>()) b = reinterpret_cast<const uint8_t&>(b) != 0;
  }
  return std::move(out_);
}

absl::StatusOr<ReceivedTensor> DecodeRecvTensorResponse(absl::Span<const absl::string_view> pieces,
                                                        Allocator* allocator) {
  RecvTensorAssembler assembler;
  RETURN_IF_ERROR(assembler.Begin(pieces, /*more_parts=*/false, allocator));
  return assembler.Take();
}

absl::StatusOr<ReceivedTensor> DecodeRecvTensorResponse(const grpc::ByteBuffer& buffer, Allocator* allocator) {
  std::vector<grpc::Slice> slices;
  grpc::Status s = buffer.Dump(&slices);
  if (!s.ok()) return Corrupt(absl::StrCat("unreadable reply: ", s.error_message()));
  std::vector<absl::string_view> pieces;
  pieces.reserve(slices.size());
  for (const grpc::Slice& slice : slices) {
    pieces.emplace_back(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return DecodeRecvTensorResponse(pieces, allocator);
}

}  // namespace worker
}  // namespace weft
