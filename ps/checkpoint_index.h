// The checkpoints of a job on disk: finding them, checking them, pruning old
// ones.
//
// A job's checkpoint directory (CheckpointPolicy.dir) holds one subdirectory
// per checkpoint, named CheckpointDirName(step): "step-000000001200". It is a
// checkpoint only when its MANIFEST reads (ReadManifest), records the same
// step as its name, and every shard file it lists matches it in size and
// CRC-32C (VerifyCheckpoint). Anything else under that name is invalid: a
// checkpoint whose writer died before the manifest, or one damaged since.
// Names that are not CheckpointDirName's (temp files, notes, other tools'
// files) and entries that are not directories are ignored.
//
// Guarantees: listing and NewestValidCheckpoint only read. PruneCheckpoints
// never deletes the newest valid checkpoint, nor any directory newer than it
// (it may be the checkpoint being written right now), nor anything outside
// `step-*` directories.
//
// Checking a checkpoint reads every byte of its shard files.
//
// Thread-safety: the functions are thread-safe and keep no state. Pruning
// while another process restores from an older checkpoint of the same
// directory can delete it under the reader: one process (the master) prunes.
#ifndef WEFT_PS_CHECKPOINT_INDEX_H_
#define WEFT_PS_CHECKPOINT_INDEX_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/env.h"
#include "proto/checkpoint.pb.h"

namespace weft {
namespace ps {

// "step-000000001200": the step zero-padded to 12 digits (more when it needs
// more). REQUIRES: step >= 0.
std::string CheckpointDirName(int64_t step);

// The step of a name CheckpointDirName produces, exactly; nullopt for any
// other name ("step-1200", "step-000000001200.tmp", "notes").
std::optional<int64_t> ParseCheckpointDirName(absl::string_view name);

struct CheckpointEntry {
  std::string path;  // <dir>/step-...
  int64_t step = 0;  // from the directory's name
  bool valid = false;
  // When !valid: why, naming the file at fault ("no manifest <path>", "shard
  // file <path> has 10 bytes, the manifest records 4160", ...).
  std::string problem;
  // When valid; also when invalid but the manifest itself read.
  CheckpointManifest manifest;
  // Valid: the total of its shard files. Invalid: the bytes of the files
  // directly in the directory, as found.
  uint64_t bytes = 0;
};

// Every checkpoint directory under `dir`, newest (highest step) first, each
// checked. A missing `dir` gives an empty list (no checkpoint yet);
// INVALID_ARGUMENT when `dir` is not a directory; the Env's error when it
// cannot be listed. A directory that cannot be checked is listed invalid.
absl::StatusOr<std::vector<CheckpointEntry>> ListCheckpoints(Env* env, const std::string& dir);

// The newest valid checkpoint under `dir`, checking newest first and
// stopping at the first valid one; each newer invalid one it skips is logged
// at warning with its problem. NOT_FOUND naming `dir` when none is valid.
absl::StatusOr<CheckpointEntry> NewestValidCheckpoint(Env* env, const std::string& dir);

// Keeps the newest `keep` valid checkpoints and every directory newer than
// the newest valid one; deletes the rest of the checkpoint directories
// (older valid ones, invalid ones older than the newest valid one). An
// invalid directory that could not be read for a reason other than its
// contents (permission, I/O error) and lies among the kept ones is left in
// place. Without a valid checkpoint, deletes nothing. INVALID_ARGUMENT when
// keep < 1. A failed deletion does not stop the others; the first error is
// returned, naming the path.
absl::Status PruneCheckpoints(Env* env, const std::string& dir, int keep);

}  // namespace ps
}  // namespace weft

#endif  // WEFT_PS_CHECKPOINT_INDEX_H_
