#include "worker/collective/collective_types.h"

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

}  // namespace collective
}  // namespace weft
