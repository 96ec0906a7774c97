// Checkpoint manifests: the file whose presence makes a checkpoint directory
// a checkpoint.
//
// A checkpoint of step S is a directory (the master's choice, e.g.
// <dir>/step-000000001200/) holding one shard file per owner of variables and,
// written last by the master once every SaveShard succeeded, the manifest
// <dir>/MANIFEST: the job, the step, the wall time and, per shard file, its
// name relative to the directory, owner, size and CRC-32C of the whole file.
//
// Layout (integers little-endian): magic "WEFTMANI", u32 version, u32 length
// N, u32 masked CRC-32C of the N bytes, N bytes of CheckpointManifest
// (proto/checkpoint.proto). Written with WriteFileAtomically.
//
// Restore picks the newest directory whose manifest reads (ReadManifest) and
// whose shard files match it (VerifyCheckpoint), skipping the others: a
// directory without a manifest was a checkpoint in progress when its writer
// died.
//
// Thread-safety: the functions are thread-safe.
#ifndef WEFT_PS_MANIFEST_H_
#define WEFT_PS_MANIFEST_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/env.h"
#include "proto/checkpoint.pb.h"
#include "ps/shard_file.h"

namespace weft {
namespace ps {

inline constexpr char kManifestFileName[] = "MANIFEST";
inline constexpr char kManifestMagic[] = "WEFTMANI";  // 8 bytes
inline constexpr uint32_t kManifestFormatVersion = 1;
// A manifest is ~100 bytes per shard file; anything larger than this is not
// one, and is rejected before it is read into memory.
inline constexpr uint64_t kMaxManifestBytes = uint64_t{16} << 20;

// INVALID_ARGUMENT naming the field: a negative step, a shard file name that
// is empty, absolute, contains ".." or is listed twice, a shard without an
// owner.
absl::Status ValidateManifest(const CheckpointManifest& manifest);

// Validates and writes <dir>/MANIFEST atomically. The directory must exist.
absl::Status WriteManifest(Env* env, const std::string& dir, const CheckpointManifest& manifest);

// Reads and validates <dir>/MANIFEST. NOT_FOUND when there is none (no
// checkpoint), DATA_LOSS naming the path when it is corrupt or truncated or
// over kMaxManifestBytes. Messages never quote the file's bytes.
absl::StatusOr<CheckpointManifest> ReadManifest(Env* env, const std::string& dir);

// Size and CRC-32C of a whole file, read in chunks.
absl::StatusOr<ShardFileInfo> ChecksumFile(Env* env, const std::string& path);

// Checks that every shard file the manifest lists exists in `dir` with the
// recorded size and CRC-32C: DATA_LOSS (or NOT_FOUND) naming the file.
absl::Status VerifyCheckpoint(Env* env, const std::string& dir, const CheckpointManifest& manifest);

}  // namespace ps
}  // namespace weft

#endif  // WEFT_PS_MANIFEST_H_
