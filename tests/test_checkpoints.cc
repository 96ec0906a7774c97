#include "tests/test_checkpoints.h"

#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "gtest/gtest.h"
#include "proto/checkpoint.pb.h"
#include "ps/checkpoint_index.h"
#include "ps/shard_file.h"

namespace weft {
namespace testing {

absl::StatusOr<SavedCheckpoint> ReadNewestCheckpoint(const std::string& dir) {
  Env* env = Env::Default();
  absl::StatusOr<ps::CheckpointEntry> newest = ps::NewestValidCheckpoint(env, dir);
  if (!newest.ok()) return newest.status();
  SavedCheckpoint out;
  out.path = newest->path;
  out.step = newest->step;
  for (const ManifestShard& ms : newest->manifest.shard()) {
    absl::StatusOr<ps::Shard> shard = ps::ReadShard(env, JoinPath(newest->path, ms.file()));
    if (!shard.ok()) return shard.status();
    if (shard->global_step != newest->step) {
      return absl::DataLossError(absl::StrCat(ms.file(), " holds step ", shard->global_step, ", its checkpoint ",
                                              newest->step));
    }
    for (const ps::ShardTensor& t : shard->tensors) {
      SavedVariable& v = out.variables[absl::StrCat(ms.owner_task(), "|", t.name)];
      v.dtype = t.value.dtype();
      v.shape = t.value.shape();
      v.bytes.assign(static_cast<const char*>(t.value.raw_data()), t.value.TotalBytes());
    }
  }
  return out;
}

void ExpectSameVariables(const SavedCheckpoint& got, const SavedCheckpoint& want) {
  EXPECT_EQ(got.step, want.step) << got.path << " vs " << want.path;
  ASSERT_FALSE(want.variables.empty()) << want.path;
  ASSERT_EQ(got.variables.size(), want.variables.size()) << got.path << " vs " << want.path;
  for (const auto& [key, w] : want.variables) {
    auto it = got.variables.find(key);
    ASSERT_NE(it, got.variables.end()) << key << " is missing from " << got.path;
    const SavedVariable& g = it->second;
    EXPECT_EQ(DTypeName(g.dtype), DTypeName(w.dtype)) << key;
    EXPECT_EQ(g.shape.DebugString(), w.shape.DebugString()) << key;
    EXPECT_TRUE(g.bytes == w.bytes) << key << " differs between " << got.path << " and " << want.path;
  }
}
}  // namespace testing
}  // namespace weft
