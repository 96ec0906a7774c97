#include "ps/shard_file.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "common/fault_injecting_env.h"
#include "gtest/gtest.h"
#include "proto/checkpoint.pb.h"

namespace weft {
namespace ps {
namespace {

template <typename T>
Tensor Filled(const TensorShape& shape, int seed) {
  Tensor t(DTypeOf<T>::value, shape);
  T* p = t.data<T>();
  for (int64_t i = 0; i < t.NumElements(); ++i) p[i] = static_cast<T>((i * 7 + seed) % 23);
  return t;
}

Tensor Halves(const TensorShape& shape) {
  Tensor t(DType::kFloat16, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.data<Half>()[i] = Half(0.5f * i - 3);
  return t;
}

Tensor Bools(const TensorShape& shape) {
  Tensor t(DType::kBool, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.data<bool>()[i] = i % 3 == 0;
  return t;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.TotalBytes()) == 0;
}

// Several dtypes and shapes, including a scalar and empty tensors.
Shard MixedShard(int seed = 0) {
  Shard s;
  s.owner_task = "/job:ps/task:1";
  s.global_step = 1200 + seed;
  s.tensors.push_back({"dense0/w", Filled<float>({3, 5}, seed), "/job:ps/task:1/device:CPU:0"});
  s.tensors.push_back({"dense0/b", Filled<float>({5}, seed + 1), ""});
  s.tensors.push_back({"count", Filled<int64_t>({}, seed + 2), ""});
  s.tensors.push_back({"ids", Filled<int32_t>({2, 2, 3}, seed + 3), ""});
  s.tensors.push_back({"empty", Filled<float>({0, 4}, seed), ""});
  s.tensors.push_back({"half", Halves({9}), ""});
  s.tensors.push_back({"mask", Bools({4, 1}), ""});
  s.tensors.push_back({"empty_scalarlike", Filled<int32_t>({0}, seed), ""});
  s.tensors.push_back({"big", Filled<float>({100, 33}, seed + 4), ""});
  return s;
}

class ShardFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string templ = JoinPath(tmp != nullptr ? tmp : "/tmp", "shard_file_test.XXXXXX");
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }

  std::string Path(const std::string& name) const { return JoinPath(dir_, name); }

  std::string Bytes(const std::string& path) { return ReadFileToString(Env::Default(), path).value(); }

  void Overwrite(const std::string& path, const std::string& bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }

  static void ExpectSame(const Shard& want, const Shard& got) {
    EXPECT_EQ(got.owner_task, want.owner_task);
    EXPECT_EQ(got.global_step, want.global_step);
    ASSERT_EQ(got.tensors.size(), want.tensors.size());
    for (size_t i = 0; i < want.tensors.size(); ++i) {
      SCOPED_TRACE(want.tensors[i].name);
      EXPECT_EQ(got.tensors[i].name, want.tensors[i].name);
      EXPECT_EQ(got.tensors[i].device, want.tensors[i].device);
      EXPECT_TRUE(SameBytes(got.tensors[i].value, want.tensors[i].value))
          << got.tensors[i].value.DebugString() << " vs " << want.tensors[i].value.DebugString();
    }
  }

  // The parsed header of a file written by WriteShard.
  ShardHeader Header(const std::string& bytes) {
    uint32_t n = 0;
    std::memcpy(&n, bytes.data() + 12, 4);
    ShardHeader h;
    EXPECT_TRUE(h.ParseFromArray(bytes.data() + kShardPrefixBytes, static_cast<int>(n)));
    return h;
  }

  // A file with a valid prefix and header CRC around `header`, and `payload`
  // bytes of zeros after it: for testing the entry checks.
  std::string Craft(const ShardHeader& header, size_t payload) {
    std::string h = header.SerializeAsString();
    std::string out(kShardMagic, 8);
    auto put = [&out](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
    put(kShardFormatVersion);
    put(static_cast<uint32_t>(h.size()));
    put(MaskCrc32c(Crc32c(h.data(), h.size())));
    out += h;
    out.append(payload, '\0');
    return out;
  }

  std::string dir_;
};

TEST_F(ShardFileTest, RoundTripsDTypesShapesScalarsAndEmptyTensors) {
  const Shard shard = MixedShard();
  const std::string path = Path("shard");
  auto info = WriteShard(Env::Default(), path, shard);
  ASSERT_TRUE(info.ok()) << info.status();
  const std::string bytes = Bytes(path);
  EXPECT_EQ(info->size, bytes.size());
  EXPECT_EQ(info->crc32c, Crc32c(bytes.data(), bytes.size()));

  auto got = ReadShard(Env::Default(), path);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSame(shard, *got);

  // Payloads are 64-byte aligned, in order, within the file.
  ShardHeader h = Header(bytes);
  EXPECT_EQ(h.file_size(), bytes.size());
  ASSERT_EQ(h.entry_size(), static_cast<int>(shard.tensors.size()));
  for (const ShardEntry& e : h.entry()) {
    EXPECT_EQ(e.offset() % kShardAlignment, 0u) << e.name();
    EXPECT_LE(e.offset() + e.length(), bytes.size()) << e.name();
  }
  // No temp file left behind.
  EXPECT_EQ(Env::Default()->ListDirectory(dir_).value(), std::vector<std::string>({"shard"}));
}

TEST_F(ShardFileTest, EmptyShardRoundTrips) {
  Shard shard;
  shard.owner_task = "/job:ps/task:0";
  shard.global_step = 7;
  ASSERT_TRUE(WriteShard(Env::Default(), Path("e"), shard).ok());
  auto got = ReadShard(Env::Default(), Path("e"));
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSame(shard, *got);
}

TEST_F(ShardFileTest, RejectsBadInput) {
  Shard s;
  s.tensors.push_back({"a", Filled<float>({2}, 0), ""});
  s.tensors.push_back({"a", Filled<float>({2}, 0), ""});
  auto dup = WriteShard(Env::Default(), Path("x"), s);
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(dup.status().message(), "'a'")) << dup.status();
  s.tensors = {{"", Filled<float>({2}, 0), ""}};
  EXPECT_EQ(WriteShard(Env::Default(), Path("x"), s).status().code(), absl::StatusCode::kInvalidArgument);
  s.tensors = {{"u", Tensor(), ""}};
  auto uninit = WriteShard(Env::Default(), Path("x"), s);
  EXPECT_EQ(uninit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(uninit.status().message(), "'u'")) << uninit.status();
  EXPECT_FALSE(Env::Default()->FileExists(Path("x")));
}

TEST_F(ShardFileTest, MissingFileIsNotFound) {
  auto got = ReadShard(Env::Default(), Path("nope"));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(got.status().message(), Path("nope"))) << got.status();
}

TEST_F(ShardFileTest, FlippedPayloadByteIsDataLossNamingTheVariable) {
  const Shard shard = MixedShard();
  const std::string path = Path("shard");
  ASSERT_TRUE(WriteShard(Env::Default(), path, shard).ok());
  const std::string good = Bytes(path);
  const ShardHeader h = Header(good);
  for (const ShardEntry& e : h.entry()) {
    if (e.length() == 0) continue;
    for (uint64_t at : {e.offset(), e.offset() + e.length() / 2, e.offset() + e.length() - 1}) {
      SCOPED_TRACE(absl::StrCat(e.name(), " byte ", at));
      std::string bad = good;
      bad[at] ^= 0x10;
      Overwrite(path, bad);
      auto got = ReadShard(Env::Default(), path);
      ASSERT_FALSE(got.ok());
      EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
      EXPECT_TRUE(absl::StrContains(got.status().message(), absl::StrCat("'", e.name(), "'"))) << got.status();
      EXPECT_TRUE(absl::StrContains(got.status().message(), path)) << got.status();
    }
  }
}

TEST_F(ShardFileTest, FlippedHeaderOrPrefixByteIsAnError) {
  const std::string path = Path("shard");
  ASSERT_TRUE(WriteShard(Env::Default(), path, MixedShard()).ok());
  const std::string good = Bytes(path);
  const size_t data_start = Header(good).entry(0).offset();
  for (size_t at = 0; at < data_start; ++at) {
    std::string bad = good;
    bad[at] ^= 0x01;
    Overwrite(path, bad);
    auto got = ReadShard(Env::Default(), path);
    // A flip in the zero padding between header and payloads is harmless.
    const size_t header_end = kShardPrefixBytes + Header(good).ByteSizeLong();
    if (at >= header_end) continue;
    ASSERT_FALSE(got.ok()) << "byte " << at;
    if (at < 8 || at >= 12) {
      EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << at << got.status();
    }
  }
}

// Truncation at every header byte and at many payload points: an error,
// never a crash (this test also runs under --config=asan).
TEST_F(ShardFileTest, TruncationAnywhereIsDataLoss) {
  const std::string path = Path("shard");
  ASSERT_TRUE(WriteShard(Env::Default(), path, MixedShard()).ok());
  const std::string good = Bytes(path);
  const size_t data_start = Header(good).entry(0).offset();
  std::vector<size_t> cuts;
  for (size_t n = 0; n <= data_start; ++n) cuts.push_back(n);
  for (size_t n = data_start; n < good.size(); n += 37) cuts.push_back(n);
  cuts.push_back(good.size() - 1);
  for (size_t n : cuts) {
    Overwrite(path, good.substr(0, n));
    auto got = ReadShard(Env::Default(), path);
    ASSERT_FALSE(got.ok()) << "cut at " << n;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << "cut at " << n << ": " << got.status();
    EXPECT_TRUE(absl::StrContains(got.status().message(), path)) << got.status();
  }
  // Trailing garbage is caught too.
  Overwrite(path, good + "x");
  EXPECT_EQ(ReadShard(Env::Default(), path).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(ShardFileTest, BadMagicAndNewerVersion) {
  const std::string path = Path("shard");
  ASSERT_TRUE(WriteShard(Env::Default(), path, MixedShard()).ok());
  std::string bytes = Bytes(path);
  std::string bad = bytes;
  bad[0] = 'X';
  Overwrite(path, bad);
  auto got = ReadShard(Env::Default(), path);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(got.status().message(), "magic")) << got.status();
  bad = bytes;
  bad[8] = 2;
  Overwrite(path, bad);
  got = ReadShard(Env::Default(), path);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(got.status().message(), "version 2")) << got.status();
}

// Headers with a valid checksum but inconsistent entries, as a buggy or
// malicious writer could produce.
TEST_F(ShardFileTest, InconsistentEntriesNameTheVariable) {
  const std::string path = Path("crafted");
  auto entry = [](ShardHeader* h, const std::string& name, DataType dtype, std::vector<int64_t> dims,
                  uint64_t offset, uint64_t length) {
    ShardEntry* e = h->add_entry();
    e->set_name(name);
    e->set_dtype(dtype);
    for (int64_t d : dims) e->mutable_shape()->add_dim(d);
    e->set_offset(offset);
    e->set_length(length);
    e->set_crc32c(Crc32c(std::string(length, '\0').data(), length));
  };
  struct Case {
    const char* name;
    std::function<void(ShardHeader*)> fill;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"length mismatch", [&](ShardHeader* h) { entry(h, "v", DT_FLOAT, {2}, 512, 4); }, "needs 8 bytes"},
      {"past the end", [&](ShardHeader* h) { entry(h, "v", DT_FLOAT, {2}, 1020, 8); }, "outside"},
      {"huge offset", [&](ShardHeader* h) { entry(h, "v", DT_FLOAT, {2}, ~uint64_t{0} - 2, 8); }, "outside"},
      {"in the header", [&](ShardHeader* h) { entry(h, "v", DT_FLOAT, {2}, 4, 8); }, "outside"},
      {"overlap",
       [&](ShardHeader* h) {
         entry(h, "v", DT_FLOAT, {4}, 512, 16);
         entry(h, "w", DT_FLOAT, {4}, 520, 16);
       },
       "overlaps"},
      {"bad dtype", [&](ShardHeader* h) { entry(h, "v", static_cast<DataType>(99), {2}, 512, 8); }, "dtype"},
      {"invalid dtype", [&](ShardHeader* h) { entry(h, "v", DT_INVALID, {2}, 512, 8); }, "dtype"},
      {"negative dim", [&](ShardHeader* h) { entry(h, "v", DT_FLOAT, {-1, 2}, 512, 8); }, "shape"},
      {"bad dim", [&](ShardHeader* h) { entry(h, "v", DT_FLOAT, {-5}, 512, 8); }, "dimension"},
      {"too many elements",
       [&](ShardHeader* h) { entry(h, "v", DT_FLOAT, {int64_t{1} << 40, int64_t{1} << 40}, 512, 8); },
       "too many"},
      {"duplicate",
       [&](ShardHeader* h) {
         entry(h, "v", DT_FLOAT, {2}, 512, 8);
         entry(h, "v", DT_FLOAT, {2}, 576, 8);
       },
       "twice"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ShardHeader h;
    h.set_owner_task("/job:ps/task:0");
    c.fill(&h);
    h.set_file_size(1);
    std::string bytes = Craft(h, 0);
    // Pad to 1024 bytes and record that size.
    ShardHeader sized = h;
    sized.set_file_size(1024);
    bytes = Craft(sized, 1024 - Craft(sized, 0).size());
    ASSERT_EQ(bytes.size(), 1024u);
    Overwrite(path, bytes);
    auto got = ReadShard(Env::Default(), path);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
    EXPECT_TRUE(absl::StrContains(got.status().message(), "variable '")) << got.status();
    EXPECT_TRUE(absl::StrContains(got.status().message(), c.expect)) << got.status();
  }
}

// Issue 17: the header length comes from the file. One that exceeds the file
// or the cap is refused before the header is read into memory, and the
// message names the field, not the bytes.
TEST_F(ShardFileTest, HeaderLengthIsCheckedBeforeAllocating) {
  const std::string path = Path("header-length");
  ShardHeader h;
  h.set_owner_task("/job:ps/task:0");
  std::string bytes = Craft(h, 0);
  uint32_t big = 0xFFFFFFF0u;
  std::memcpy(&bytes[12], &big, 4);
  Overwrite(path, bytes);
  auto got = ReadShard(Env::Default(), path);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "header length field gives 4294967280 bytes"))
      << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), path)) << got.status();

  // A sparse file that really is big enough: the cap stops it.
  const uint32_t over = static_cast<uint32_t>(kMaxShardHeaderBytes + 1);
  std::memcpy(&bytes[12], &over, 4);
  Overwrite(path, bytes);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(kShardPrefixBytes + over + 64)), 0);
  got = ReadShard(Env::Default(), path);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "over the limit")) << got.status();
}

// A name with control bytes (a damaged or hostile writer) is escaped in the
// message, and the entry's index and field are named.
TEST_F(ShardFileTest, EntryErrorsNameIndexAndFieldAndEscapeTheName) {
  const std::string path = Path("escaped");
  ShardHeader h;
  h.set_owner_task("/job:ps/task:0");
  ShardEntry* e = h.add_entry();
  e->set_name("bad\n\x1b[31mname");
  e->set_dtype(DT_FLOAT);
  e->mutable_shape()->add_dim(2);
  e->set_offset(512);
  e->set_length(4);
  h.set_file_size(1024);
  std::string bytes = Craft(h, 1024 - Craft(h, 0).size());
  Overwrite(path, bytes);
  auto got = ReadShard(Env::Default(), path);
  ASSERT_FALSE(got.ok());
  const std::string msg(got.status().message());
  EXPECT_TRUE(absl::StrContains(msg, "entry 0 (variable 'bad\\n\\x1b[31mname')")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "field length")) << msg;
  EXPECT_FALSE(absl::StrContains(msg, "\n")) << msg;
  EXPECT_FALSE(absl::StrContains(msg, "\x1b")) << msg;
}

// Every injected write failure leaves the previous file intact and names the
// path; no temp file is left behind.
TEST_F(ShardFileTest, FailedWritesLeaveThePreviousFile) {
  FaultInjectingEnv env(Env::Default());
  const std::string path = Path("shard");
  const Shard old_shard = MixedShard(0);
  ASSERT_TRUE(WriteShard(&env, path, old_shard).ok());
  const uint64_t file_size = Env::Default()->GetFileSize(path).value();
  const int appends = env.appends();
  ASSERT_GT(appends, 3);
  const Shard new_shard = MixedShard(5);

  std::vector<std::pair<std::string, FaultInjectingEnv::Faults>> cases;
  for (int n = 1; n <= appends; ++n) {
    FaultInjectingEnv::Faults f;
    f.fail_append_at = n;
    cases.emplace_back(absl::StrCat("append ", n, " fails"), f);
  }
  for (int64_t space : {int64_t{0}, int64_t{10}, int64_t{100}, static_cast<int64_t>(file_size / 2),
                        static_cast<int64_t>(file_size - 1)}) {
    FaultInjectingEnv::Faults f;
    f.space_left = space;
    cases.emplace_back(absl::StrCat("disk full after ", space, " bytes"), f);
  }
  FaultInjectingEnv::Faults f;
  f.sync_errno = EIO;
  cases.emplace_back("fsync fails", f);
  f = FaultInjectingEnv::Faults();
  f.rename_errno = EIO;
  cases.emplace_back("rename fails", f);
  f = FaultInjectingEnv::Faults();
  f.close_errno = EIO;
  cases.emplace_back("close fails", f);
  f = FaultInjectingEnv::Faults();
  f.open_for_write_errno = ENOSPC;
  cases.emplace_back("open fails", f);

  for (const auto& [name, faults] : cases) {
    SCOPED_TRACE(name);
    env.SetFaults(faults);
    auto info = WriteShard(&env, path, new_shard);
    ASSERT_FALSE(info.ok());
    EXPECT_TRUE(absl::StrContains(info.status().message(), path)) << info.status();
    EXPECT_TRUE(absl::StrContains(info.status().message(), "[injected]")) << info.status();
    if (faults.space_left >= 0) {
      EXPECT_EQ(info.status().code(), absl::StatusCode::kResourceExhausted);
    }
    env.ClearFaults();
    auto got = ReadShard(&env, path);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectSame(old_shard, *got);
    EXPECT_EQ(Env::Default()->ListDirectory(dir_).value(), std::vector<std::string>({"shard"}));
  }
}

// A file system that silently drops the end of a write: the write reports
// success, and the reader must catch the truncated file.
TEST_F(ShardFileTest, SilentShortWriteIsCaughtOnRead) {
  FaultInjectingEnv env(Env::Default());
  const std::string path = Path("shard");
  ASSERT_TRUE(WriteShard(&env, path, MixedShard()).ok());
  const int64_t size = env.bytes_written();
  for (int64_t keep : {int64_t{5}, int64_t{40}, size / 2, size - 1}) {
    SCOPED_TRACE(keep);
    FaultInjectingEnv::Faults f;
    f.space_left = keep;
    f.silent_short_writes = true;
    env.SetFaults(f);
    ASSERT_TRUE(WriteShard(&env, path, MixedShard()).ok());
    env.ClearFaults();
    auto got = ReadShard(&env, path);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  }
}

}  // namespace
}  // namespace ps
}  // namespace weft
