#include "ps/manifest.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/crc32c.h"
#include "common/status_macros.h"

namespace weft {
namespace ps {
namespace {

using internal::GetU32;
using internal::PutU32;

constexpr size_t kPrefixBytes = 20;  // magic, version, length, crc


}  // namespace

absl::Status ValidateManifest(const CheckpointManifest& manifest) {
  if (manifest.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("manifest: step ", manifest.step(), " is negative"));
  }
  absl::flat_hash_set<std::string> files;
  for (int i = 0; i < manifest.shard_size(); ++i) {
    const ManifestShard& s = manifest.shard(i);
    // Escaped: the name may come from a file, and must not put raw bytes
    // into a message.
    const std::string where = absl::StrCat("manifest shard ", i, " ('", absl::CHexEscape(s.file()), "')");
    if (s.file().empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": no file name"));
    if (s.file()[0] == '/') {
      return absl::InvalidArgumentError(absl::StrCat(where, ": file must be relative to the checkpoint directory"));
    }
    for (absl::string_view part : absl::StrSplit(s.file(), '/')) {
      if (part == ".." || part == "." || part.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": file must be a plain relative path"));
      }
    }
    if (!files.insert(s.file()).second) return absl::InvalidArgumentError(absl::StrCat(where, ": listed twice"));
    if (s.owner_task().empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": no owner task"));
  }
  return absl::OkStatus();
}

absl::Status WriteManifest(Env* env, const std::string& dir, const CheckpointManifest& manifest) {
  RETURN_IF_ERROR(ValidateManifest(manifest));
  std::string body;
  if (!manifest.SerializeToString(&body)) return absl::InternalError("manifest does not serialise");
  char prefix[kPrefixBytes];
  std::memcpy(prefix, kManifestMagic, 8);
  PutU32(prefix + 8, kManifestFormatVersion);
  PutU32(prefix + 12, static_cast<uint32_t>(body.size()));
  PutU32(prefix + 16, MaskCrc32c(Crc32c(body.data(), body.size())));
  const absl::string_view pieces[] = {absl::string_view(prefix, sizeof prefix), body};
  return WriteFileAtomically(env, JoinPath(dir, kManifestFileName), pieces);
}

absl::StatusOr<CheckpointManifest> ReadManifest(Env* env, const std::string& dir) {
  const std::string path = JoinPath(dir, kManifestFileName);
  auto corrupt = [&path](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("manifest ", path, ": ", what));
  };
  // The size is checked before the file is read into memory: a MANIFEST that
  // is really some huge file must not be loaded whole.
  ASSIGN_OR_RETURN(uint64_t file_size, env->GetFileSize(path));
  if (file_size > kMaxManifestBytes) {
    return corrupt(absl::StrCat(file_size, " bytes, over the limit of ", kMaxManifestBytes, " for a manifest"));
  }
  ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(env, path));
  if (bytes.size() > kMaxManifestBytes) {  // it grew since
    return corrupt(absl::StrCat(bytes.size(), " bytes, over the limit of ", kMaxManifestBytes, " for a manifest"));
  }
  if (bytes.size() < kPrefixBytes) return corrupt(absl::StrCat("truncated: ", bytes.size(), " bytes"));
  if (std::memcmp(bytes.data(), kManifestMagic, 8) != 0) return corrupt("bad magic: not a weft manifest");
  const uint32_t version = GetU32(bytes.data() + 8);
  if (version != kManifestFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat("manifest ", path, " has format version ", version,
                                                      "; this build reads version ", kManifestFormatVersion));
  }
  const uint64_t n = GetU32(bytes.data() + 12);
  if (n != bytes.size() - kPrefixBytes) {
    return corrupt(absl::StrCat("the length field records ", n, " bytes of body, the file has ",
                                bytes.size() - kPrefixBytes));
  }
  const absl::string_view body(bytes.data() + kPrefixBytes, n);
  if (UnmaskCrc32c(GetU32(bytes.data() + 16)) != Crc32c(body.data(), body.size())) {
    return corrupt("checksum mismatch");
  }
  CheckpointManifest manifest;
  if (!manifest.ParseFromArray(body.data(), static_cast<int>(body.size()))) return corrupt("does not parse");
  absl::Status valid = ValidateManifest(manifest);
  if (!valid.ok()) return corrupt(valid.message());
  return manifest;
}

absl::StatusOr<ShardFileInfo> ChecksumFile(Env* env, const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, env->NewRandomAccessFile(path));
  ShardFileInfo info;
  info.size = file->Size();
  constexpr size_t kChunk = size_t{4} << 20;
  std::unique_ptr<char[]> buf(new char[kChunk]);
  for (uint64_t at = 0; at < info.size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, info.size - at));
    RETURN_IF_ERROR(file->Read(at, n, buf.get()));
    info.crc32c = Crc32cExtend(info.crc32c, buf.get(), n);
    at += n;
  }
  return info;
}

absl::Status VerifyCheckpoint(Env* env, const std::string& dir, const CheckpointManifest& manifest) {
  for (const ManifestShard& s : manifest.shard()) {
    const std::string path = JoinPath(dir, s.file());
    ASSIGN_OR_RETURN(ShardFileInfo info, ChecksumFile(env, path));
    if (info.size != s.size()) {
      return absl::DataLossError(absl::StrCat("checkpoint ", dir, ": shard file ", path, " has ", info.size,
                                              " bytes, the manifest records ", s.size()));
    }
    if (info.crc32c != s.crc32c()) {
      return absl::DataLossError(absl::StrCat("checkpoint ", dir, ": shard file ", path,
                                              " does not match the manifest's checksum"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ps
}  // namespace weft
