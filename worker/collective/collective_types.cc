#include "worker/collective/collective_types.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace weft {
namespace collective {

std::string CollectiveGroup::Describe(int r) const {
  if (r < 0 || r >= size()) return absl::StrCat("rank ", r, " (not in group ", group_key, ")");
  return absl::StrCat("task ", members[r].task, " (rank ", r, ")");
}

std::string ChunkKey::DebugString() const {
  return absl::StrCat("group ", group_key, " instance ", instance_key, " step ", step_id, " round ", round, " chunk ",
                      chunk, " from rank ", src_rank);
}

ReceivedChunk ReceivedChunk::Owned() const {
  auto buffer = std::make_shared<std::string>();
  buffer->reserve(size());
  for (absl::string_view p : pieces) buffer->append(p.data(), p.size());
  ReceivedChunk out;
  out.pieces.push_back(*buffer);
  out.owner = std::move(buffer);
  return out;
}

}  // namespace collective
}  // namespace weft
