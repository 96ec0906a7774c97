#include "ps/shard_file.h"

#include <errno.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/crc32c.h"
#include "common/status_macros.h"
#include "common/tensor_proto_coding.h"
#include "proto/checkpoint.pb.h"

namespace weft {
namespace ps {
namespace {

using internal::GetU32;
using internal::PutU32;

uint64_t AlignUp(uint64_t n) { return (n + kShardAlignment - 1) / kShardAlignment * kShardAlignment; }


absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("shard file ", path, ": ", what));
}

// Names come from a header whose CRC matched, so they are the writer's; they
// are escaped all the same, so a damaged one cannot put control bytes in a
// log line.
absl::Status CorruptEntry(const std::string& path, int index, const std::string& name, absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("shard file ", path, ", entry ", index, " (variable '", absl::CHexEscape(name), "'): ", what));
}

// The Env a shard is written through: `base` with every new file narrowed
// to mode 0600 as soon as it is created, before a byte is written, so the
// temp file and the shard it becomes are never readable by other users (a
// shard holds a model's weights; the POSIX Env creates files 0644). The
// chmod goes to the local file system, so `base` must be backed by it
// (Env::Default or a wrapper of it, as every Env in weft is).
class PrivateFileEnv final : public EnvWrapper {
 public:
  explicit PrivateFileEnv(Env* base) : EnvWrapper(base) {}

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, base()->NewWritableFile(path));
    if (::chmod(path.c_str(), 0600) != 0) {
      const int err = errno;
      file.reset();
      base()->DeleteFile(path).IgnoreError();
      return absl::ErrnoToStatus(err, absl::StrCat("chmod(", path, ", 0600)"));
    }
    return file;
  }
};

// Places every entry's payload after the prefix and header, aligned, sets
// the file size and serialises the header into `bytes`.
absl::Status LayOut(const std::string& path, ShardHeader* header, uint64_t* header_size, uint64_t* end,
                    std::string* bytes) {
  header->set_file_size(1);
  // fixed64 fields serialise to the same size whatever their nonzero value,
  // so the header's size is known before the offsets are.
  *header_size = header->ByteSizeLong();
  uint64_t at = AlignUp(kShardPrefixBytes + *header_size);
  for (ShardEntry& e : *header->mutable_entry()) {
    e.set_offset(at);
    at = AlignUp(at + e.length());
  }
  // The file ends right after the last payload, without trailing padding.
  *end = AlignUp(kShardPrefixBytes + *header_size);
  if (header->entry_size() > 0) {
    const ShardEntry& last = header->entry(header->entry_size() - 1);
    *end = last.offset() + last.length();
  }
  header->set_file_size(*end);
  if (*header_size > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("shard ", path, ": header of ", *header_size, " bytes is too big"));
  }
  if (!header->SerializeToString(bytes) || bytes->size() != *header_size) {
    return absl::InternalError(absl::StrCat("shard ", path, ": header layout changed while serialising"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShardFileInfo> WriteShard(Env* env, const std::string& path, const Shard& shard) {
  // Snapshot first: the checksum must describe exactly the bytes written,
  // even if a step updates a variable meanwhile.
  std::vector<Tensor> snapshots;
  snapshots.reserve(shard.tensors.size());
  absl::flat_hash_set<absl::string_view> names;
  ShardHeader header;
  header.set_owner_task(shard.owner_task);
  header.set_global_step(shard.global_step);
  for (const ShardTensor& t : shard.tensors) {
    if (t.name.empty()) return absl::InvalidArgumentError(absl::StrCat("shard ", path, ": a variable has no name"));
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("shard ", path, ": variable '", t.name, "' is given twice"));
    }
    if (!t.value.IsInitialized()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard ", path, ": variable '", t.name, "' has no value (uninitialised tensor)"));
    }
    snapshots.push_back(t.value.DeepCopy());
    const Tensor& v = snapshots.back();
    ShardEntry* e = header.add_entry();
    e->set_name(t.name);
    e->set_dtype(DTypeToProto(v.dtype()));
    ShapeToProto(v.shape(), e->mutable_shape());
    e->set_length(v.TotalBytes());
    e->set_crc32c(Crc32c(v.raw_data(), v.TotalBytes()));
    e->set_device(t.device);
    e->set_offset(1);  // placeholder: nonzero, so that it takes its final size
  }
  uint64_t header_size = 0, end = 0;
  std::string header_bytes;
  RETURN_IF_ERROR(LayOut(path, &header, &header_size, &end, &header_bytes));

  char prefix[kShardPrefixBytes];
  std::memcpy(prefix, kShardMagic, 8);
  PutU32(prefix + 8, kShardFormatVersion);
  PutU32(prefix + 12, static_cast<uint32_t>(header_size));
  PutU32(prefix + 16, MaskCrc32c(Crc32c(header_bytes.data(), header_bytes.size())));

  static const char kZeros[kShardAlignment] = {};
  std::vector<absl::string_view> pieces;
  pieces.emplace_back(prefix, sizeof prefix);
  pieces.emplace_back(header_bytes);
  uint64_t written = kShardPrefixBytes + header_size;
  for (int i = 0; i < header.entry_size(); ++i) {
    const ShardEntry& e = header.entry(i);
    if (e.offset() > written) pieces.emplace_back(kZeros, e.offset() - written);
    if (e.length() > 0) pieces.emplace_back(static_cast<const char*>(snapshots[i].raw_data()), e.length());
    written = e.offset() + e.length();
  }
  if (end > written) pieces.emplace_back(kZeros, end - written);  // only with no entries

  ShardFileInfo info;
  for (absl::string_view p : pieces) {
    info.crc32c = Crc32cExtend(info.crc32c, p.data(), p.size());
    info.size += p.size();
  }
  PrivateFileEnv private_env(env);
  RETURN_IF_ERROR(WriteFileAtomically(&private_env, path, pieces));
  return info;
}

namespace {

// The prefix and header of the shard file at `path` (`size` bytes), each
// checked; *data_start is where the payload area begins.
absl::StatusOr<ShardHeader> ReadShardHeader(RandomAccessFile* file, const std::string& path, uint64_t size,
                                            uint64_t* data_start) {
  char prefix[kShardPrefixBytes];
  RETURN_IF_ERROR(file->Read(0, sizeof prefix, prefix));
  if (std::memcmp(prefix, kShardMagic, 8) != 0) return Corrupt(path, "bad magic: not a weft shard file");
  const uint32_t version = GetU32(prefix + 8);
  if (version != kShardFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat("shard file ", path, " has format version ", version,
                                                      "; this build reads version ", kShardFormatVersion));
  }
  const uint64_t header_size = GetU32(prefix + 12);
  if (header_size > size - kShardPrefixBytes) {
    return Corrupt(path, absl::StrCat("truncated: the header length field gives ", header_size,
                                      " bytes, the file has ", size - kShardPrefixBytes, " after the prefix"));
  }
  if (header_size > kMaxShardHeaderBytes) {
    return Corrupt(path, absl::StrCat("the header length field gives ", header_size, " bytes, over the limit of ",
                                      kMaxShardHeaderBytes));
  }
  std::string header_bytes(header_size, '\0');
  RETURN_IF_ERROR(file->Read(kShardPrefixBytes, header_size, header_bytes.data()));
  if (UnmaskCrc32c(GetU32(prefix + 16)) != Crc32c(header_bytes.data(), header_bytes.size())) {
    return Corrupt(path, "header checksum mismatch");
  }
  ShardHeader header;
  if (!header.ParseFromString(header_bytes)) return Corrupt(path, "header does not parse");
  if (header.file_size() != size) {
    return Corrupt(path, absl::StrCat("the header records ", header.file_size(), " bytes but the file has ", size,
                                      size < header.file_size() ? " (truncated)" : " (trailing data)"));
  }
  *data_start = kShardPrefixBytes + header_size;
  return header;
}

// Every entry of the header checked against the file before any payload is
// read: names unique, dtype, shape and length agreeing, each payload inside
// [data_start, size) and none overlapping another. Returns each entry's
// dtype and shape.
absl::StatusOr<std::vector<std::pair<DType, TensorShape>>> CheckShardEntries(const ShardHeader& header,
                                                                             const std::string& path,
                                                                             uint64_t data_start, uint64_t size) {
  absl::flat_hash_set<absl::string_view> names;
  std::vector<std::pair<uint64_t, int>> by_offset;
  std::vector<std::pair<DType, TensorShape>> types;
  for (int i = 0; i < header.entry_size(); ++i) {
    const ShardEntry& e = header.entry(i);
    if (e.name().empty()) return Corrupt(path, absl::StrCat("entry ", i, " has no name"));
    if (!names.insert(e.name()).second) return CorruptEntry(path, i, e.name(), "appears twice");
    auto dtype = DTypeFromProto(e.dtype());
    if (!dtype.ok() || *dtype == DType::kInvalid) {
      return CorruptEntry(path, i, e.name(), absl::StrCat("field dtype: invalid dtype ", e.dtype()));
    }
    auto shape = ShapeFromProto(e.shape());
    if (!shape.ok()) return CorruptEntry(path, i, e.name(), absl::StrCat("field shape: ", shape.status().message()));
    if (!shape->IsFullyDefined()) {
      return CorruptEntry(path, i, e.name(),
                          absl::StrCat("field shape: ", shape->DebugString(), " is not fully defined"));
    }
    // Checked: the element count is bounded, the byte count of a wide dtype
    // need not be, and a wrapped product could match a small length.
    auto bytes = CheckedByteSize(shape->num_elements(), DTypeSize(*dtype), "shape");
    if (!bytes.ok()) return CorruptEntry(path, i, e.name(), absl::StrCat("field ", bytes.status().message()));
    if (e.length() != *bytes) {
      return CorruptEntry(path, i, e.name(), absl::StrCat("field length: ", DTypeName(*dtype), shape->DebugString(),
                                                          " needs ", *bytes, " bytes but the entry records ",
                                                          e.length()));
    }
    // Written so that nothing can wrap: offset <= size first, then the
    // length against what is left after it.
    if (e.offset() < data_start || e.offset() > size || e.length() > size - e.offset()) {
      return CorruptEntry(path, i, e.name(), absl::StrCat("fields offset and length: bytes [", e.offset(), ", +",
                                                          e.length(), ") lie outside the payload area [",
                                                          data_start, ", ", size, ")"));
    }
    by_offset.emplace_back(e.offset(), i);
    types.emplace_back(*dtype, *std::move(shape));
  }
  std::sort(by_offset.begin(), by_offset.end());
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const ShardEntry& prev = header.entry(by_offset[k - 1].second);
    const ShardEntry& cur = header.entry(by_offset[k].second);
    if (cur.offset() < prev.offset() + prev.length()) {
      return CorruptEntry(path, by_offset[k].second, cur.name(),
                          absl::StrCat("overlaps entry ", by_offset[k - 1].second, " (variable '",
                                       absl::CHexEscape(prev.name()), "')"));
    }
  }

  return types;
}

}  // namespace

absl::StatusOr<Shard> ReadShard(Env* env, const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, env->NewRandomAccessFile(path));
  const uint64_t size = file->Size();
  if (size < kShardPrefixBytes) {
    return Corrupt(path, absl::StrCat("truncated: ", size, " bytes, shorter than the ", kShardPrefixBytes,
                                      "-byte prefix"));
  }
  uint64_t data_start = 0;
  ASSIGN_OR_RETURN(const ShardHeader header, ReadShardHeader(file.get(), path, size, &data_start));
  using Types = std::vector<std::pair<DType, TensorShape>>;
  ASSIGN_OR_RETURN(const Types types, CheckShardEntries(header, path, data_start, size));

  Shard shard;
  shard.owner_task = header.owner_task();
  shard.global_step = header.global_step();
  shard.tensors.reserve(header.entry_size());
  for (int i = 0; i < header.entry_size(); ++i) {
    const ShardEntry& e = header.entry(i);
    Tensor t(types[i].first, types[i].second);
    if (e.length() > 0) {
      absl::Status s = file->Read(e.offset(), e.length(), static_cast<char*>(t.raw_data()));
      if (!s.ok()) return Annotate(s, absl::StrCat("variable '", absl::CHexEscape(e.name()), "'"));
    }
    if (Crc32c(t.raw_data(), e.length()) != e.crc32c()) {
      return CorruptEntry(path, i, e.name(), "payload checksum mismatch");
    }
    shard.tensors.push_back(ShardTensor{e.name(), std::move(t), e.device()});
  }
  return shard;
}

}  // namespace ps
}  // namespace weft
