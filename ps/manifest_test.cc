#include "ps/manifest.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "common/fault_injecting_env.h"
#include "gtest/gtest.h"

namespace weft {
namespace ps {
namespace {

class ManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string templ = JoinPath(tmp != nullptr ? tmp : "/tmp", "manifest_test.XXXXXX");
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }

  void Overwrite(const std::string& path, const std::string& bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }

  // Writes two shard files the way the ps does and a manifest that lists
  // them, the way the master will.
  CheckpointManifest WriteCheckpoint(int64_t step) {
    CheckpointManifest m;
    m.set_job_name("mnist");
    m.set_step(step);
    m.set_wall_time_micros(Env::Default()->NowMicros());
    for (int task = 0; task < 2; ++task) {
      Shard shard;
      shard.owner_task = "/job:ps/task:" + std::to_string(task);
      shard.global_step = step;
      Tensor t(DType::kFloat32, {3});
      for (int i = 0; i < 3; ++i) t.data<float>()[i] = task * 10 + i;
      shard.tensors.push_back({"v" + std::to_string(task), t, ""});
      const std::string file = "ps-" + std::to_string(task) + ".shard";
      auto info = WriteShard(Env::Default(), JoinPath(dir_, file), shard);
      EXPECT_TRUE(info.ok()) << info.status();
      ManifestShard* s = m.add_shard();
      s->set_file(file);
      s->set_owner_task(shard.owner_task);
      s->set_size(info->size);
      s->set_crc32c(info->crc32c);
    }
    EXPECT_TRUE(WriteManifest(Env::Default(), dir_, m).ok());
    return m;
  }

  std::string dir_;
};

TEST_F(ManifestTest, RoundTripAndVerify) {
  const CheckpointManifest m = WriteCheckpoint(1200);
  auto got = ReadManifest(Env::Default(), dir_);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->SerializeAsString(), m.SerializeAsString());
  EXPECT_TRUE(VerifyCheckpoint(Env::Default(), dir_, *got).ok());
}

TEST_F(ManifestTest, NoManifestMeansNoCheckpoint) {
  auto got = ReadManifest(Env::Default(), dir_);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(got.status().message(), JoinPath(dir_, kManifestFileName))) << got.status();
}

TEST_F(ManifestTest, CorruptOrTruncatedManifestIsDataLoss) {
  WriteCheckpoint(5);
  const std::string path = JoinPath(dir_, kManifestFileName);
  const std::string good = ReadFileToString(Env::Default(), path).value();
  for (size_t n = 0; n < good.size(); ++n) {
    Overwrite(path, good.substr(0, n));
    auto got = ReadManifest(Env::Default(), dir_);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << "cut at " << n << ": " << got.status();
  }
  for (size_t at = 0; at < good.size(); ++at) {
    if (at >= 8 && at < 12) continue;  // the version: FAILED_PRECONDITION
    std::string bad = good;
    bad[at] ^= 0x04;
    Overwrite(path, bad);
    auto got = ReadManifest(Env::Default(), dir_);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << "byte " << at << ": " << got.status();
    EXPECT_TRUE(absl::StrContains(got.status().message(), path)) << got.status();
  }
}

TEST_F(ManifestTest, VerifyCatchesAChangedOrMissingShard) {
  const CheckpointManifest m = WriteCheckpoint(9);
  const std::string shard0 = JoinPath(dir_, "ps-0.shard");
  std::string bytes = ReadFileToString(Env::Default(), shard0).value();
  bytes.back() ^= 1;
  Overwrite(shard0, bytes);
  absl::Status s = VerifyCheckpoint(Env::Default(), dir_, m);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), shard0)) << s;
  Overwrite(shard0, bytes.substr(0, 10));
  s = VerifyCheckpoint(Env::Default(), dir_, m);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  ASSERT_TRUE(Env::Default()->DeleteFile(shard0).ok());
  s = VerifyCheckpoint(Env::Default(), dir_, m);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), shard0)) << s;
}

TEST_F(ManifestTest, ValidationNamesTheField) {
  CheckpointManifest m;
  m.set_step(-1);
  EXPECT_TRUE(absl::StrContains(ValidateManifest(m).message(), "step"));
  m.set_step(1);
  EXPECT_TRUE(ValidateManifest(m).ok());
  for (const char* bad : {"", "/abs/file", "../up", "a/../b", "a//b", "./a"}) {
    CheckpointManifest c = m;
    ManifestShard* s = c.add_shard();
    s->set_file(bad);
    s->set_owner_task("/job:ps/task:0");
    absl::Status st = ValidateManifest(c);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_FALSE(WriteManifest(Env::Default(), dir_, c).ok()) << bad;
  }
  CheckpointManifest twice = m;
  for (int i = 0; i < 2; ++i) {
    ManifestShard* s = twice.add_shard();
    s->set_file("sub/ps-0.shard");
    s->set_owner_task("/job:ps/task:0");
  }
  EXPECT_TRUE(absl::StrContains(ValidateManifest(twice).message(), "twice"));
  CheckpointManifest no_owner = m;
  no_owner.add_shard()->set_file("x");
  EXPECT_TRUE(absl::StrContains(ValidateManifest(no_owner).message(), "owner"));
  EXPECT_FALSE(Env::Default()->FileExists(JoinPath(dir_, kManifestFileName)));
}

// Issue 17: ReadManifest read the whole file before looking at it. A
// MANIFEST that is really some huge file is refused by its size alone.
TEST_F(ManifestTest, OversizedManifestIsRefusedBeforeReading) {
  const std::string path = JoinPath(dir_, kManifestFileName);
  Overwrite(path, "WEFTMANI");
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(kMaxManifestBytes + 1)), 0);  // sparse
  auto got = ReadManifest(Env::Default(), dir_);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), path)) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "over the limit")) << got.status();
}

TEST_F(ManifestTest, ErrorsDoNotQuoteTheFilesBytes) {
  const std::string path = JoinPath(dir_, kManifestFileName);
  Overwrite(path, "db_password=hunter2 and more secret text");
  auto got = ReadManifest(Env::Default(), dir_);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(absl::StrContains(got.status().message(), "hunter2")) << got.status();
  EXPECT_FALSE(absl::StrContains(got.status().message(), "db_pass")) << got.status();

  // A shard file name with control bytes is escaped in validation errors.
  CheckpointManifest m;
  m.set_step(1);
  ManifestShard* s = m.add_shard();
  s->set_file(std::string("a\n\x1b/../b"));
  s->set_owner_task("/job:ps/task:0");
  const absl::Status st = ValidateManifest(m);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(st.message(), "'a\\n\\x1b/../b'")) << st;
  EXPECT_FALSE(absl::StrContains(st.message(), "\x1b")) << st;
}

TEST_F(ManifestTest, FailedWriteLeavesNoManifest) {
  FaultInjectingEnv env(Env::Default());
  FaultInjectingEnv::Faults f;
  f.rename_errno = EIO;
  env.SetFaults(f);
  CheckpointManifest m;
  m.set_step(3);
  absl::Status s = WriteManifest(&env, dir_, m);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), kManifestFileName)) << s;
  EXPECT_EQ(ReadManifest(&env, dir_).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Env::Default()->ListDirectory(dir_).value().empty());
}

}  // namespace
}  // namespace ps
}  // namespace weft
