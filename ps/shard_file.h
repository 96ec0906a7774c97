// Shard files: one owner's variables at one global step, as one checkpoint
// file.
//
// Layout (integers little-endian):
//
//   0   8 bytes   magic "WEFTSHRD"
//   8   u32       format version (kShardFormatVersion)
//   12  u32       header length H
//   16  u32       masked CRC-32C of the header bytes (crc32c.h's MaskCrc32c)
//   20  H bytes   ShardHeader (proto/checkpoint.proto): owner, step, file
//                 size and per tensor its name, dtype, shape, offset, length
//                 and CRC-32C
//   ... payloads, each at a 64-byte-aligned offset, zero padding between
//
// WriteShard goes through WriteFileAtomically, so a crash or an error leaves
// the previous file (or none), never a torn one. It snapshots every tensor
// before checksumming, so a value that changes while it is being saved still
// gives a file whose checksums match (of whichever value it copied).
//
// ReadShard trusts nothing in the file: it checks the magic, the version, the
// header's CRC and parse, the recorded file size against the real one, every
// entry's dtype, shape, length and bounds (no overlaps), and every payload's
// CRC-32C, and returns DATA_LOSS naming the path and, where one is at fault,
// the entry, its variable and the field. Every length and offset is checked
// with overflow-safe arithmetic against the real file size (and the header
// length against kMaxShardHeaderBytes) before anything is allocated for it;
// messages never quote the file's bytes. It reads payloads straight into
// fresh tensor buffers.
//
// Thread-safety: the functions are thread-safe; concurrent writers of one
// path each write their own temp file and the last rename wins.
#ifndef WEFT_PS_SHARD_FILE_H_
#define WEFT_PS_SHARD_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/env.h"
#include "common/tensor.h"

namespace weft {
namespace ps {

inline constexpr char kShardMagic[] = "WEFTSHRD";  // 8 bytes, no terminator written
inline constexpr uint32_t kShardFormatVersion = 1;
inline constexpr uint64_t kShardPrefixBytes = 20;  // magic, version, length, crc
inline constexpr uint64_t kShardAlignment = 64;
// A header longer than this is corrupt: it is ~100 bytes per variable, so
// 64 MiB would describe over half a million of them. Checked before the
// header is read into memory.
inline constexpr uint64_t kMaxShardHeaderBytes = uint64_t{64} << 20;

struct ShardTensor {
  std::string name;
  Tensor value;        // initialised, any dtype, any fully defined shape
  std::string device;  // informational; may be empty
};

struct Shard {
  std::string owner_task;
  int64_t global_step = 0;
  std::vector<ShardTensor> tensors;  // in file order
};

// What a write produced: the numbers the master records in the manifest.
struct ShardFileInfo {
  uint64_t size = 0;
  uint32_t crc32c = 0;  // of the whole file
};

// Writes `shard` to `path` atomically. INVALID_ARGUMENT naming the variable
// for an empty or duplicate name or an uninitialised tensor; the Env's error
// (naming the path and the call) when the write fails, with `path` left as
// it was.
absl::StatusOr<ShardFileInfo> WriteShard(Env* env, const std::string& path, const Shard& shard);

// Reads and validates the whole file. NOT_FOUND when it does not exist;
// DATA_LOSS for anything corrupt, truncated or inconsistent;
// FAILED_PRECONDITION for a format version this build does not read.
absl::StatusOr<Shard> ReadShard(Env* env, const std::string& path);

namespace internal {
// Little-endian fixed-width words of the shard and manifest file prefixes.
inline void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
inline uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}
}  // namespace internal

}  // namespace ps
}  // namespace weft

#endif  // WEFT_PS_SHARD_FILE_H_
