#include "ps/checkpoint_index.h"

#include <errno.h>
#include <stdlib.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/fault_injecting_env.h"
#include "common/tensor.h"
#include "gtest/gtest.h"
#include "ps/manifest.h"
#include "ps/shard_file.h"

namespace weft {
namespace ps {
namespace {

constexpr int kTensorElements = 256;  // 1 KiB per shard payload

class CheckpointIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string templ = JoinPath(tmp != nullptr ? tmp : "/tmp", "checkpoint_index_test.XXXXXX");
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = JoinPath(templ, "ckpt");
  }

  std::string CkptPath(int64_t step) const { return JoinPath(dir_, CheckpointDirName(step)); }

  struct WriteOptions {
    bool manifest = true;
    int64_t manifest_step = -1;     // -1: the checkpoint's step
    Env* manifest_env = nullptr;    // null: the shards' Env
  };

  // Writes two shard files into <dir_>/step-<step> the way the ps does and,
  // only once both are written, the MANIFEST the way the master does.
  absl::Status WriteCheckpoint(Env* env, int64_t step, const WriteOptions& o) {
    const std::string dir = CkptPath(step);
    absl::Status s = env->CreateDirs(dir);
    if (!s.ok()) return s;
    CheckpointManifest m;
    m.set_job_name("mnist");
    m.set_step(o.manifest_step >= 0 ? o.manifest_step : step);
    m.set_wall_time_micros(Env::Default()->NowMicros());
    for (int task = 0; task < 2; ++task) {
      Shard shard;
      shard.owner_task = absl::StrCat("/job:ps/task:", task);
      shard.global_step = step;
      Tensor t(DType::kFloat32, {kTensorElements});
      for (int i = 0; i < kTensorElements; ++i) t.data<float>()[i] = static_cast<float>(step + task * 1000 + i);
      shard.tensors.push_back({absl::StrCat("v", task), t, ""});
      const std::string file = absl::StrCat("ps-", task, ".shard");
      auto info = WriteShard(env, JoinPath(dir, file), shard);
      if (!info.ok()) return info.status();
      ManifestShard* ms = m.add_shard();
      ms->set_file(file);
      ms->set_owner_task(shard.owner_task);
      ms->set_size(info->size);
      ms->set_crc32c(info->crc32c);
    }
    if (!o.manifest) return absl::OkStatus();
    return WriteManifest(o.manifest_env != nullptr ? o.manifest_env : env, dir, m);
  }

  void WriteValid(int64_t step) { ASSERT_TRUE(WriteCheckpoint(Env::Default(), step, {}).ok()); }

  static std::string ReadAll(const std::string& path) { return ReadFileToString(Env::Default(), path).value(); }

  static void Overwrite(const std::string& path, const std::string& bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }

  std::vector<int64_t> Steps() {
    std::vector<int64_t> out;
    auto list = ListCheckpoints(Env::Default(), dir_);
    EXPECT_TRUE(list.ok()) << list.status();
    if (list.ok()) {
      for (const CheckpointEntry& e : *list) out.push_back(e.step);
    }
    return out;
  }

  // The entry of `step` in the listing; fails the test when it is absent.
  CheckpointEntry Entry(int64_t step) {
    auto list = ListCheckpoints(Env::Default(), dir_);
    EXPECT_TRUE(list.ok()) << list.status();
    if (list.ok()) {
      for (const CheckpointEntry& e : *list) {
        if (e.step == step) return e;
      }
    }
    ADD_FAILURE() << "no entry for step " << step;
    return CheckpointEntry();
  }

  void ExpectNewestValid(Env* env, int64_t step) {
    auto newest = NewestValidCheckpoint(env, dir_);
    ASSERT_TRUE(newest.ok()) << newest.status();
    EXPECT_EQ(newest->step, step);
    EXPECT_EQ(newest->path, CkptPath(step));
    EXPECT_TRUE(newest->valid);
    EXPECT_EQ(newest->manifest.step(), step);
  }

  std::string dir_;
};

TEST(CheckpointDirNameTest, RoundTripsOnlyTheCanonicalName) {
  EXPECT_EQ(CheckpointDirName(1200), "step-000000001200");
  EXPECT_EQ(CheckpointDirName(0), "step-000000000000");
  EXPECT_EQ(CheckpointDirName(1000000000000), "step-1000000000000");
  EXPECT_EQ(ParseCheckpointDirName("step-000000001200"), 1200);
  EXPECT_EQ(ParseCheckpointDirName("step-000000000000"), 0);
  EXPECT_EQ(ParseCheckpointDirName("step-1000000000000"), 1000000000000);
  for (const char* bad : {"step-1200", "step-0000000001200", "step-000000001200.tmp", "step-", "step-00000000120a",
                          "step-+00000001200", "step--00000000001", "Step-000000001200", "MANIFEST",
                          "step-99999999999999999999"}) {
    EXPECT_EQ(ParseCheckpointDirName(bad), std::nullopt) << bad;
  }
}

TEST_F(CheckpointIndexTest, MissingDirIsEmptyAndAFileIsInvalidArgument) {
  auto list = ListCheckpoints(Env::Default(), dir_);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_TRUE(list->empty());
  auto newest = NewestValidCheckpoint(Env::Default(), dir_);
  EXPECT_EQ(newest.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(newest.status().message(), dir_)) << newest.status();

  Overwrite(dir_, "not a directory");
  list = ListCheckpoints(Env::Default(), dir_);
  EXPECT_EQ(list.status().code(), absl::StatusCode::kInvalidArgument) << list.status();
  EXPECT_TRUE(absl::StrContains(list.status().message(), dir_)) << list.status();
  EXPECT_EQ(PruneCheckpoints(Env::Default(), dir_, 1).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CheckpointIndexTest, ListsNewestFirstAndPicksTheNewestValid) {
  WriteValid(200);
  WriteValid(100);
  WriteValid(1200);
  // Names that are not checkpoints are ignored.
  Overwrite(JoinPath(dir_, "notes.txt"), "hello");
  Overwrite(JoinPath(dir_, "step-000000009999.tmp.3f2a"), "x");
  Overwrite(JoinPath(dir_, CheckpointDirName(5000)), "a file, not a directory");
  ASSERT_TRUE(Env::Default()->CreateDirs(JoinPath(dir_, "step-7000")).ok());

  auto list = ListCheckpoints(Env::Default(), dir_);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ(Steps(), std::vector<int64_t>({1200, 200, 100}));
  for (const CheckpointEntry& e : *list) {
    EXPECT_TRUE(e.valid) << e.path << ": " << e.problem;
    EXPECT_TRUE(e.problem.empty());
    EXPECT_EQ(e.manifest.step(), e.step);
    EXPECT_EQ(e.manifest.shard_size(), 2);
    EXPECT_EQ(e.bytes, e.manifest.shard(0).size() + e.manifest.shard(1).size());
    EXPECT_GT(e.bytes, 2u * kTensorElements * sizeof(float));
  }
  ExpectNewestValid(Env::Default(), 1200);
}

TEST_F(CheckpointIndexTest, CrashBetweenShardsAndManifestIsSkipped) {
  WriteValid(100);
  WriteOptions o;
  o.manifest = false;
  ASSERT_TRUE(WriteCheckpoint(Env::Default(), 200, o).ok());
  ExpectNewestValid(Env::Default(), 100);
  const CheckpointEntry e = Entry(200);
  EXPECT_FALSE(e.valid);
  EXPECT_TRUE(absl::StrContains(e.problem, JoinPath(CkptPath(200), kManifestFileName))) << e.problem;
  EXPECT_TRUE(absl::StrContains(e.problem, "no manifest")) << e.problem;
  // What is on disk: the two shard files.
  EXPECT_EQ(e.bytes, Env::Default()->GetFileSize(JoinPath(CkptPath(200), "ps-0.shard")).value() +
                         Env::Default()->GetFileSize(JoinPath(CkptPath(200), "ps-1.shard")).value());
}

// Each kind of damage to the newer checkpoint leaves the older one the
// newest valid, and the listing names the damaged file.
TEST_F(CheckpointIndexTest, DamagedCheckpointsAreSkippedNamingTheFile) {
  struct Case {
    const char* name;
    const char* file;  // the file the problem must name
    std::function<void(const std::string& ckpt, const std::string& path)> damage;
  };
  const Case cases[] = {
      {"truncated shard", "ps-1.shard",
       [](const std::string&, const std::string& p) { Overwrite(p, ReadAll(p).substr(0, 100)); }},
      {"flipped byte in a shard", "ps-0.shard",
       [](const std::string&, const std::string& p) {
         std::string b = ReadAll(p);
         b[b.size() / 2] ^= 0x10;
         Overwrite(p, b);
       }},
      {"truncated manifest", kManifestFileName,
       [](const std::string&, const std::string& p) { Overwrite(p, ReadAll(p).substr(0, 30)); }},
      {"corrupt manifest", kManifestFileName,
       [](const std::string&, const std::string& p) {
         std::string b = ReadAll(p);
         b[b.size() - 3] ^= 0x01;
         Overwrite(p, b);
       }},
      {"missing shard", "ps-1.shard",
       [](const std::string&, const std::string& p) { ASSERT_TRUE(Env::Default()->DeleteFile(p).ok()); }},
  };
  WriteValid(100);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    WriteValid(200);
    const std::string path = JoinPath(CkptPath(200), c.file);
    c.damage(CkptPath(200), path);
    ExpectNewestValid(Env::Default(), 100);
    const CheckpointEntry e = Entry(200);
    EXPECT_FALSE(e.valid);
    EXPECT_TRUE(absl::StrContains(e.problem, path)) << e.problem;
    ASSERT_TRUE(DeleteRecursively(Env::Default(), CkptPath(200)).ok());
  }
}

TEST_F(CheckpointIndexTest, ManifestOfAnotherStepIsSkipped) {
  WriteValid(100);
  WriteOptions o;
  o.manifest_step = 300;
  ASSERT_TRUE(WriteCheckpoint(Env::Default(), 200, o).ok());
  ExpectNewestValid(Env::Default(), 100);
  const CheckpointEntry e = Entry(200);
  EXPECT_FALSE(e.valid);
  EXPECT_TRUE(absl::StrContains(e.problem, JoinPath(CkptPath(200), kManifestFileName))) << e.problem;
  EXPECT_TRUE(absl::StrContains(e.problem, "300")) << e.problem;
  EXPECT_EQ(e.manifest.step(), 300);  // it read; it just is not this directory's
}

// A write that fails (or is silently cut short) in the middle of a shard of
// step 200 leaves step 100 the newest valid checkpoint.
TEST_F(CheckpointIndexTest, InjectedWriteFailuresLeaveTheOlderCheckpointNewest) {
  FaultInjectingEnv env(Env::Default());
  ASSERT_TRUE(WriteCheckpoint(&env, 100, {}).ok());
  const uint64_t shard_size = env.GetFileSize(JoinPath(CkptPath(100), "ps-0.shard")).value();

  struct Case {
    const char* name;
    FaultInjectingEnv::Faults faults;
    bool write_fails;
    const char* file;  // the file the problem names
  };
  std::vector<Case> cases;
  {
    FaultInjectingEnv::Faults f;
    f.fail_append_at = 2;  // the first shard's header
    cases.push_back({"failed write", f, true, kManifestFileName});
  }
  {
    FaultInjectingEnv::Faults f;
    f.space_left = static_cast<int64_t>(shard_size + shard_size / 2);  // fills in the second shard
    cases.push_back({"full disk", f, true, kManifestFileName});
  }
  {
    // A disk that loses the end of a write and says nothing: the master
    // writes a complete manifest (through an honest Env), and the check
    // against the shard's real size catches it.
    FaultInjectingEnv::Faults f;
    f.space_left = static_cast<int64_t>(shard_size / 2);
    f.silent_short_writes = true;
    cases.push_back({"silent short write", f, false, "ps-0.shard"});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    env.SetFaults(c.faults);
    WriteOptions o;
    o.manifest_env = Env::Default();
    absl::Status s = WriteCheckpoint(&env, 200, o);
    EXPECT_EQ(s.ok(), !c.write_fails) << s;
    env.ClearFaults();
    ExpectNewestValid(&env, 100);
    const CheckpointEntry e = Entry(200);
    EXPECT_FALSE(e.valid);
    EXPECT_TRUE(absl::StrContains(e.problem, JoinPath(CkptPath(200), c.file))) << e.problem;
    EXPECT_TRUE(Entry(100).valid);
    ASSERT_TRUE(DeleteRecursively(&env, CkptPath(200)).ok());
  }
}

TEST_F(CheckpointIndexTest, OnlyInvalidCheckpointsIsNotFound) {
  WriteOptions o;
  o.manifest = false;
  ASSERT_TRUE(WriteCheckpoint(Env::Default(), 200, o).ok());
  WriteValid(100);
  Overwrite(JoinPath(CkptPath(100), "ps-0.shard"), "torn");
  auto newest = NewestValidCheckpoint(Env::Default(), dir_);
  EXPECT_EQ(newest.status().code(), absl::StatusCode::kNotFound) << newest.status();
  EXPECT_TRUE(absl::StrContains(newest.status().message(), dir_)) << newest.status();
  EXPECT_EQ(Steps(), std::vector<int64_t>({200, 100}));
}

TEST_F(CheckpointIndexTest, PruneKeepsTheNewestAndLeavesNewerInProgress) {
  for (int64_t step : {10, 20, 30, 40, 50}) WriteValid(step);
  // Damaged, between kept ones: deleted. Being written, newer than all
  // valid ones: left alone.
  WriteValid(45);
  Overwrite(JoinPath(CkptPath(45), kManifestFileName), "junk");
  WriteOptions o;
  o.manifest = false;
  ASSERT_TRUE(WriteCheckpoint(Env::Default(), 60, o).ok());
  Overwrite(JoinPath(dir_, "notes.txt"), "mine");

  ASSERT_TRUE(PruneCheckpoints(Env::Default(), dir_, 2).ok());
  EXPECT_EQ(Steps(), std::vector<int64_t>({60, 50, 40}));
  EXPECT_FALSE(Entry(60).valid);
  EXPECT_TRUE(Entry(50).valid);
  EXPECT_TRUE(Entry(40).valid);
  EXPECT_TRUE(Env::Default()->FileExists(JoinPath(dir_, "notes.txt")));
  // Idempotent; keep=1 never drops the newest valid one.
  ASSERT_TRUE(PruneCheckpoints(Env::Default(), dir_, 2).ok());
  EXPECT_EQ(Steps(), std::vector<int64_t>({60, 50, 40}));
  ASSERT_TRUE(PruneCheckpoints(Env::Default(), dir_, 1).ok());
  EXPECT_EQ(Steps(), std::vector<int64_t>({60, 50}));
  ExpectNewestValid(Env::Default(), 50);
}

TEST_F(CheckpointIndexTest, PruneWithoutAValidCheckpointDeletesNothing) {
  WriteOptions o;
  o.manifest = false;
  ASSERT_TRUE(WriteCheckpoint(Env::Default(), 10, o).ok());
  ASSERT_TRUE(WriteCheckpoint(Env::Default(), 20, o).ok());
  ASSERT_TRUE(PruneCheckpoints(Env::Default(), dir_, 1).ok());
  EXPECT_EQ(Steps(), std::vector<int64_t>({20, 10}));
  // A missing directory: nothing to prune.
  EXPECT_TRUE(PruneCheckpoints(Env::Default(), JoinPath(dir_, "nope"), 1).ok());
}

TEST_F(CheckpointIndexTest, PruneRefusesKeepBelowOne) {
  WriteValid(10);
  for (int keep : {0, -1}) {
    absl::Status s = PruneCheckpoints(Env::Default(), dir_, keep);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "keep")) << s;
  }
  EXPECT_EQ(Steps(), std::vector<int64_t>({10}));
}

TEST_F(CheckpointIndexTest, PruneReportsAFailedDeletionNamingThePath) {
  FaultInjectingEnv env(Env::Default());
  for (int64_t step : {10, 20, 30}) WriteValid(step);
  FaultInjectingEnv::Faults f;
  f.delete_errno = EACCES;
  env.SetFaults(f);
  absl::Status s = PruneCheckpoints(&env, dir_, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), CkptPath(20))) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "2 of 2")) << s;
  EXPECT_EQ(Steps(), std::vector<int64_t>({30, 20, 10}));
  env.ClearFaults();
  ASSERT_TRUE(PruneCheckpoints(&env, dir_, 1).ok());
  EXPECT_EQ(Steps(), std::vector<int64_t>({30}));
}

}  // namespace
}  // namespace ps
}  // namespace weft
