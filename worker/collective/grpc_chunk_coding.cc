#include "worker/collective/grpc_chunk_coding.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "proto/collective_service.pb.h"

namespace weft {
namespace collective {
namespace {

using google::protobuf::io::CodedOutputStream;

void UnrefPinnedTensor(void* pinned) { delete static_cast<Tensor*>(pinned); }

absl::Status Corrupt(absl::string_view why) {
  return absl::DataLossError(absl::StrCat("corrupt collective chunk: ", why));
}

}  // namespace

grpc::ByteBuffer EncodeChunk(const ChunkKey& key, SendChunk chunk) {
  ChunkHeader header;
  header.set_group_key(key.group_key);
  header.set_instance_key(key.instance_key);
  header.set_step_id(key.step_id);
  header.set_round(key.round);
  header.set_chunk(key.chunk);
  header.set_src_rank(key.src_rank);
  header.set_payload_bytes(chunk.size);
  const size_t body = header.ByteSizeLong();
  const size_t prefix = CodedOutputStream::VarintSize32(static_cast<uint32_t>(body));
  grpc::Slice head(prefix + body);
  uint8_t* out = const_cast<uint8_t*>(head.begin());
  CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(body), out);
  header.SerializeWithCachedSizesToArray(out + prefix);
  if (chunk.size == 0) return grpc::ByteBuffer(&head, 1);
  // gRPC drops the slice, and with it the pinned copy, once the bytes are out.
  auto* pinned = new Tensor(std::move(chunk.pin));
  grpc::Slice slices[2] = {std::move(head),
                           grpc::Slice(const_cast<char*>(chunk.data), chunk.size, &UnrefPinnedTensor, pinned)};
  return grpc::ByteBuffer(slices, 2);
}

absl::StatusOr<std::pair<ChunkKey, ReceivedChunk>> DecodeChunk(grpc::ByteBuffer* buffer) {
  auto slices = std::make_shared<std::vector<grpc::Slice>>();
  grpc::Status dumped = buffer->Dump(slices.get());
  buffer->Clear();
  if (!dumped.ok()) return Corrupt(absl::StrCat("unreadable message: ", dumped.error_message()));

  // Walk the pieces: the varint length, then the header (copied, it is tiny
  // and may straddle slices), then the payload (left where it is).
  size_t slice = 0, offset = 0;
  auto next_byte = [&](uint8_t* b) {
    while (slice < slices->size() && offset == (*slices)[slice].size()) ++slice, offset = 0;
    if (slice == slices->size()) return false;
    *b = (*slices)[slice].begin()[offset++];
    return true;
  };
  uint32_t header_len = 0;
  for (int shift = 0;; shift += 7) {
    uint8_t b;
    if (shift > 28 || !next_byte(&b)) return Corrupt("truncated or overlong header length");
    header_len |= static_cast<uint32_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) break;
  }
  if (header_len > kMaxChunkHeaderBytes) {
    return Corrupt(absl::StrCat("header length ", header_len, " exceeds ", kMaxChunkHeaderBytes));
  }
  std::string header_bytes(header_len, '\0');
  for (uint32_t i = 0; i < header_len; ++i) {
    if (!next_byte(reinterpret_cast<uint8_t*>(&header_bytes[i]))) return Corrupt("truncated header");
  }
  ChunkHeader header;
  if (!header.ParseFromString(header_bytes)) return Corrupt("header does not parse");

  std::pair<ChunkKey, ReceivedChunk> out;
  out.first = ChunkKey{header.group_key(), header.instance_key(), header.step_id(),
                       header.round(),     header.chunk(),        header.src_rank()};
  size_t payload = 0;
  for (; slice < slices->size(); ++slice, offset = 0) {
    const grpc::Slice& s = (*slices)[slice];
    if (offset == s.size()) continue;
    out.second.pieces.emplace_back(reinterpret_cast<const char*>(s.begin()) + offset, s.size() - offset);
    payload += s.size() - offset;
  }
  if (payload != header.payload_bytes()) {
    return Corrupt(absl::StrCat(out.first.DebugString(), ": header announces ", header.payload_bytes(),
                                " payload bytes, message has ", payload));
  }
  out.second.owner = std::move(slices);
  return out;
}

}  // namespace collective
}  // namespace weft
