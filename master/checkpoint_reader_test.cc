#include "master/checkpoint_reader.h"

#include <stdlib.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/tensor.h"
#include "common/tensor_proto_coding.h"
#include "gtest/gtest.h"
#include "ps/checkpoint_index.h"
#include "ps/manifest.h"
#include "ps/shard_file.h"

namespace weft {
namespace master {
namespace {

constexpr int kElements = 256;  // 1 KiB per variable

class CheckpointReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string templ = JoinPath(tmp != nullptr ? tmp : "/tmp", "checkpoint_reader_test.XXXXXX");
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = JoinPath(templ, "job");
  }

  // Two shard files of two variables each ("a<task>", "b<task>"), values
  // step + 1000 task + i, then the manifest.
  void Write(int64_t step) {
    Env* env = Env::Default();
    const std::string dir = JoinPath(dir_, ps::CheckpointDirName(step));
    ASSERT_TRUE(env->CreateDirs(dir).ok());
    CheckpointManifest m;
    m.set_step(step);
    for (int task = 0; task < 2; ++task) {
      ps::Shard shard;
      shard.owner_task = absl::StrCat("/job:ps/task:", task);
      shard.global_step = step;
      for (const char* name : {"a", "b"}) {
        Tensor t(DType::kFloat32, {kElements});
        for (int i = 0; i < kElements; ++i) t.data<float>()[i] = static_cast<float>(step + task * 1000 + i);
        shard.tensors.push_back({absl::StrCat(name, task), t, ""});
      }
      const std::string file = absl::StrCat("ps-", task, ".shard");
      auto info = ps::WriteShard(env, JoinPath(dir, file), shard);
      ASSERT_TRUE(info.ok()) << info.status();
      ManifestShard* s = m.add_shard();
      s->set_file(file);
      s->set_owner_task(shard.owner_task);
      s->set_size(info->size);
      s->set_crc32c(info->crc32c);
    }
    ASSERT_TRUE(ps::WriteManifest(env, dir, m).ok());
  }

  std::string dir_;
};

TEST_F(CheckpointReaderTest, TheNewestCheckpointComesBackWholeInOnePage) {
  Write(10);
  Write(20);
  auto page = ReadCheckpointPage(Env::Default(), dir_, 0, 0);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->step(), 20);
  EXPECT_EQ(page->total(), 4);
  EXPECT_EQ(page->next(), 0);
  ASSERT_EQ(page->variable_size(), 4);
  EXPECT_EQ(page->variable(3).name(), "b1");
  auto t = TensorFromProto(page->variable(3).tensor());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->data<float>()[5], 20 + 1000 + 5);
}

TEST_F(CheckpointReaderTest, PagesSplitAtTheByteBudgetAndCoverEveryVariableOnce) {
  Write(10);
  std::vector<std::string> names;
  int64_t first = 0;
  int pages = 0;
  do {
    // Room for a bit more than one variable per page.
    auto page = ReadCheckpointPage(Env::Default(), dir_, 10, first, kElements * 4 + 1);
    ASSERT_TRUE(page.ok()) << page.status();
    ASSERT_EQ(page->variable_size(), 1);
    names.push_back(page->variable(0).name());
    first = page->next();
    ++pages;
  } while (first != 0 && pages < 10);
  EXPECT_EQ(names, (std::vector<std::string>{"a0", "b0", "a1", "b1"}));
}

TEST_F(CheckpointReaderTest, MissingOrInvalidCheckpointsAndBadArgumentsAreClearErrors) {
  auto none = ReadCheckpointPage(Env::Default(), dir_, 0, 0);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound) << none.status();
  Write(10);
  auto other_step = ReadCheckpointPage(Env::Default(), dir_, 11, 0);
  EXPECT_EQ(other_step.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(other_step.status().message().find("no checkpoint of step 11"), std::string::npos);
  EXPECT_EQ(ReadCheckpointPage(Env::Default(), dir_, -1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadCheckpointPage(Env::Default(), dir_, 0, -1).status().code(), absl::StatusCode::kInvalidArgument);
  auto past = ReadCheckpointPage(Env::Default(), dir_, 0, 4);
  EXPECT_EQ(past.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(past.status().message().find("past the checkpoint's 4 variables"), std::string::npos) << past.status();

  // A shard damaged after the manifest: that checkpoint is not valid.
  const std::string shard = JoinPath(JoinPath(dir_, ps::CheckpointDirName(10)), "ps-1.shard");
  std::string bytes = *ReadFileToString(Env::Default(), shard);
  bytes[bytes.size() - 3] ^= 0x40;
  FILE* f = std::fopen(shard.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  auto damaged = ReadCheckpointPage(Env::Default(), dir_, 10, 0);
  EXPECT_EQ(damaged.status().code(), absl::StatusCode::kNotFound) << damaged.status();
  EXPECT_NE(damaged.status().message().find("not valid"), std::string::npos) << damaged.status();
}

}  // namespace
}  // namespace master
}  // namespace weft
