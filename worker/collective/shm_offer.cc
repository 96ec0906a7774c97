#include "worker/collective/shm_offer.h"

#include <cstring>
#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"

namespace weft {
namespace collective {
namespace {

// A chunk's key in a ring message's tag.
struct TagKey {
  int64_t group_key, instance_key, step_id;
  int32_t round, chunk, src_rank;
};
static_assert(sizeof(TagKey) <= ShmRing::kTagBytes);

}  // namespace

ShmRing::Tag EncodeChunkTag(const ChunkKey& k) {
  ShmRing::Tag tag{};
  const TagKey t{k.group_key, k.instance_key, k.step_id, k.round, k.chunk, k.src_rank};
  std::memcpy(tag.data(), &t, sizeof(t));
  return tag;
}

ChunkKey DecodeChunkTag(const ShmRing::Tag& tag) {
  TagKey t;
  std::memcpy(&t, tag.data(), sizeof(t));
  return ChunkKey{t.group_key, t.instance_key, t.step_id, t.round, t.chunk, t.src_rank};
}

std::vector<MessagePart> SplitMessage(const ChunkKey& key, SendChunk chunk, size_t max_part) {
  std::vector<MessagePart> parts;
  const size_t first = max_part - chunk.prefix.size();  // REQUIRES: prefix shorter than max_part
  if (chunk.size <= first) {
    parts.push_back(MessagePart{key, std::move(chunk)});
    return parts;
  }
  parts.reserve(1 + (chunk.size - first + max_part - 1) / max_part);
  size_t offset = 0;
  for (int32_t i = 0; offset < chunk.size; ++i) {
    MessagePart part;
    part.key = key;
    part.key.chunk = i;
    part.chunk.pin = chunk.pin;
    part.chunk.data = chunk.data + offset;
    part.chunk.size = std::min(chunk.size - offset, i == 0 ? first : max_part);
    if (i == 0) part.chunk.prefix = std::move(chunk.prefix);
    offset += part.chunk.size;
    parts.push_back(std::move(part));
  }
  return parts;
}

std::vector<StatusCallback> JoinCallbacks(size_t n, StatusCallback done) {
  struct Join {
    absl::Mutex mu;
    size_t left ABSL_GUARDED_BY(mu);
    absl::Status first ABSL_GUARDED_BY(mu);
    StatusCallback done;
  };
  auto join = std::make_shared<Join>();
  {
    absl::MutexLock lock(&join->mu);
    join->left = n;
  }
  join->done = std::move(done);
  std::vector<StatusCallback> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back([join](const absl::Status& s) {
      absl::Status status;
      {
        absl::MutexLock lock(&join->mu);
        join->first.Update(s);
        if (--join->left != 0) return;
        status = join->first;
      }
      std::move(join->done)(status);
    });
  }
  return out;
}

}  // namespace collective
}  // namespace weft
