#include "master/checkpoint_reader.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tensor_proto_coding.h"
#include "ps/checkpoint_index.h"
#include "ps/shard_file.h"

namespace weft {
namespace master {
namespace {

// The valid checkpoint of `step` (0: the newest) under `job_dir`.
absl::StatusOr<ps::CheckpointEntry> FindCheckpoint(Env* env, const std::string& job_dir, int64_t step) {
  if (step == 0) return ps::NewestValidCheckpoint(env, job_dir);
  ASSIGN_OR_RETURN(std::vector<ps::CheckpointEntry> all, ps::ListCheckpoints(env, job_dir));
  for (ps::CheckpointEntry& e : all) {
    if (e.step != step) continue;
    if (!e.valid) return absl::NotFoundError(absl::StrCat("checkpoint ", e.path, " is not valid: ", e.problem));
    return std::move(e);
  }
  return absl::NotFoundError(absl::StrCat("no checkpoint of step ", step, " in ", job_dir));
}

}  // namespace

absl::StatusOr<ReadJobCheckpointResponse> ReadCheckpointPage(Env* env, const std::string& job_dir, int64_t step,
                                                              int64_t first, uint64_t max_bytes) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("step must be >= 0 (0: the newest), got ", step));
  if (first < 0) return absl::InvalidArgumentError(absl::StrCat("first must be >= 0, got ", first));
  ASSIGN_OR_RETURN(ps::CheckpointEntry entry, FindCheckpoint(env, job_dir, step));
  const CheckpointManifest& manifest = entry.manifest;  // read and checked against the files
  ReadJobCheckpointResponse page;
  page.set_step(manifest.step());
  int64_t index = 0;
  uint64_t bytes = 0;
  for (const ManifestShard& file : manifest.shard()) {
    ASSIGN_OR_RETURN(ps::Shard shard, ps::ReadShard(env, JoinPath(entry.path, file.file())));
    for (const ps::ShardTensor& t : shard.tensors) {
      const int64_t i = index++;
      if (i < first || page.next() != 0) continue;
      const uint64_t size = t.value.TotalBytes();
      if (page.variable_size() > 0 && bytes + size > max_bytes) {
        page.set_next(i);
        continue;
      }
      bytes += size;
      NamedTensorProto* v = page.add_variable();
      v->set_name(t.name);
      TensorToProto(t.value, v->mutable_tensor());
    }
  }
  page.set_total(index);
  if (first > 0 && first >= index) {
    return absl::InvalidArgumentError(absl::StrCat("first ", first, " is past the checkpoint's ", index, " variables"));
  }
  return page;
}

}  // namespace master
}  // namespace weft
