#include "common/env.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/fault_injecting_env.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string base = tmp != nullptr ? tmp : "/tmp";
    std::string templ = JoinPath(base, "env_test.XXXXXX");
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }

  std::string Path(const std::string& name) const { return JoinPath(dir_, name); }

  absl::Status Write(Env* env, const std::string& path, const std::string& contents) {
    const absl::string_view piece = contents;
    return WriteFileAtomically(env, path, {&piece, 1});
  }

  std::string Read(const std::string& path) {
    auto s = ReadFileToString(Env::Default(), path);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : "";
  }

  // Entries of dir_ (temp files would show here).
  std::vector<std::string> Entries() { return Env::Default()->ListDirectory(dir_).value(); }

  std::string dir_;
};

TEST(PathTest, DirNameBaseNameJoin) {
  EXPECT_EQ(DirName("/a/b/c"), "/a/b");
  EXPECT_EQ(DirName("/a/b/"), "/a");
  EXPECT_EQ(DirName("/a"), "/");
  EXPECT_EQ(DirName("a"), ".");
  EXPECT_EQ(BaseName("/a/b/c"), "c");
  EXPECT_EQ(BaseName("c"), "c");
  EXPECT_EQ(JoinPath("/a", "b"), "/a/b");
  EXPECT_EQ(JoinPath("/a/", "b"), "/a/b");
  EXPECT_EQ(JoinPath("", "b"), "b");
}

TEST_F(EnvTest, WriteReadRangeListDelete) {
  Env* env = Env::Default();
  const std::string path = Path("f");
  EXPECT_FALSE(env->FileExists(path));
  ASSERT_TRUE(Write(env, path, "hello, world").ok());
  EXPECT_TRUE(env->FileExists(path));
  EXPECT_EQ(Read(path), "hello, world");
  EXPECT_EQ(env->GetFileSize(path).value(), 12u);

  auto file = env->NewRandomAccessFile(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->Size(), 12u);
  char buf[5];
  ASSERT_TRUE((*file)->Read(7, 5, buf).ok());
  EXPECT_EQ(std::string(buf, 5), "world");
  absl::Status past = (*file)->Read(10, 5, buf);
  EXPECT_EQ(past.code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(absl::StrContains(past.message(), path)) << past;

  // Replacing keeps one file and no temp files.
  ASSERT_TRUE(Write(env, path, "second").ok());
  EXPECT_EQ(Read(path), "second");
  EXPECT_EQ(Entries(), std::vector<std::string>({"f"}));

  ASSERT_TRUE(env->DeleteFile(path).ok());
  EXPECT_FALSE(env->FileExists(path));
  EXPECT_TRUE(Entries().empty());
}

TEST_F(EnvTest, ErrorsNameThePathAndTheCall) {
  Env* env = Env::Default();
  auto missing = env->NewRandomAccessFile(Path("nope"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), Path("nope"))) << missing.status();
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "No such file")) << missing.status();

  EXPECT_EQ(env->GetFileSize(Path("nope")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(env->DeleteFile(Path("nope")).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(env->ListDirectory(Path("nope")).status().code(), absl::StatusCode::kNotFound);

  // A write into a missing directory fails at open, naming the temp file.
  absl::Status s = Write(env, Path("nodir/f"), "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(s.message(), "open for write")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), Path("nodir/f"))) << s;

  // Reading a directory is an error, not a crash.
  EXPECT_FALSE(ReadFileToString(env, dir_).ok());
}

TEST_F(EnvTest, CreateDirsMakesParentsAndIsIdempotent) {
  Env* env = Env::Default();
  const std::string deep = Path("a/b/c");
  ASSERT_TRUE(env->CreateDirs(deep).ok());
  ASSERT_TRUE(env->CreateDirs(deep).ok());
  ASSERT_TRUE(Write(env, JoinPath(deep, "f"), "x").ok());
  EXPECT_EQ(env->ListDirectory(deep).value(), std::vector<std::string>({"f"}));
  // A file in the way.
  absl::Status s = env->CreateDirs(JoinPath(deep, "f/g"));
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), JoinPath(deep, "f"))) << s;
}

TEST_F(EnvTest, NowMicrosIsWallClock) {
  const int64_t now = Env::Default()->NowMicros();
  EXPECT_GT(now, int64_t{1600000000} * 1000000);  // after 2020
}

// Every injected failure leaves the old file intact and no temp file behind.
TEST_F(EnvTest, InjectedFailuresLeaveTheOldFile) {
  FaultInjectingEnv env(Env::Default());
  const std::string path = Path("f");
  ASSERT_TRUE(Write(&env, path, "old contents").ok());
  const std::string big(1000, 'n');

  struct Case {
    const char* name;
    FaultInjectingEnv::Faults faults;
    absl::StatusCode code;
    const char* call;
  };
  std::vector<Case> cases;
  {
    FaultInjectingEnv::Faults f;
    f.fail_append_at = 1;
    cases.push_back({"first append", f, absl::StatusCode::kUnknown, "write"});
  }
  {
    FaultInjectingEnv::Faults f;
    f.space_left = 10;
    cases.push_back({"disk full", f, absl::StatusCode::kResourceExhausted, "write"});
  }
  {
    FaultInjectingEnv::Faults f;
    f.sync_errno = EIO;
    cases.push_back({"fsync", f, absl::StatusCode::kUnknown, "fsync"});
  }
  {
    FaultInjectingEnv::Faults f;
    f.close_errno = EIO;
    cases.push_back({"close", f, absl::StatusCode::kUnknown, "close"});
  }
  {
    FaultInjectingEnv::Faults f;
    f.rename_errno = EXDEV;
    cases.push_back({"rename", f, absl::StatusCode::kUnknown, "rename"});
  }
  {
    FaultInjectingEnv::Faults f;
    f.open_for_write_errno = EACCES;
    cases.push_back({"open", f, absl::StatusCode::kPermissionDenied, "open for write"});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    env.SetFaults(c.faults);
    absl::Status s = Write(&env, path, big);
    ASSERT_FALSE(s.ok());
    // EIO and EXDEV map to codes absl chooses; the call and path always show.
    if (c.code != absl::StatusCode::kUnknown) {
      EXPECT_EQ(s.code(), c.code) << s;
    }
    EXPECT_TRUE(absl::StrContains(s.message(), c.call)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), path)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "[injected]")) << s;
    EXPECT_EQ(Read(path), "old contents");
    EXPECT_EQ(Entries(), std::vector<std::string>({"f"}));
  }

  // A failed directory fsync happens after the rename: the new file is in
  // place, and the error still says the write is not known durable.
  FaultInjectingEnv::Faults f;
  f.sync_dir_errno = EIO;
  env.SetFaults(f);
  absl::Status s = Write(&env, path, "new");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), "fsync dir")) << s;
  EXPECT_EQ(Read(path), "new");
}

TEST_F(EnvTest, CountsAndSilentShortWrites) {
  FaultInjectingEnv env(Env::Default());
  FaultInjectingEnv::Faults f;
  f.space_left = 4;
  f.silent_short_writes = true;
  env.SetFaults(f);
  const std::string path = Path("f");
  const absl::string_view pieces[] = {"ab", "cdef", "gh"};
  // The lying disk: the write "succeeds" and the file is short.
  ASSERT_TRUE(WriteFileAtomically(&env, path, pieces).ok());
  EXPECT_EQ(Read(path), "abcd");
  EXPECT_EQ(env.appends(), 3);
  EXPECT_EQ(env.bytes_written(), 4);
  EXPECT_EQ(env.renames(), 1);
  ASSERT_EQ(env.written_paths().size(), 1u);
  EXPECT_TRUE(absl::StartsWith(env.written_paths()[0], path + ".tmp.")) << env.written_paths()[0];

  env.ClearFaults();
  f = FaultInjectingEnv::Faults();
  f.fail_append_at = 2;
  env.SetFaults(f);
  EXPECT_FALSE(WriteFileAtomically(&env, path, pieces).ok());
  EXPECT_EQ(env.appends(), 2);
  EXPECT_EQ(Read(path), "abcd");
}

TEST_F(EnvTest, IsDirectoryAndDeleteDir) {
  Env* env = Env::Default();
  ASSERT_TRUE(Write(env, Path("f"), "x").ok());
  ASSERT_TRUE(env->CreateDirs(Path("d/e")).ok());
  EXPECT_TRUE(env->IsDirectory(Path("d")).value());
  EXPECT_FALSE(env->IsDirectory(Path("f")).value());
  auto missing = env->IsDirectory(Path("nope"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), Path("nope"))) << missing.status();

  // Not empty: refused, naming the call and the directory.
  absl::Status s = env->DeleteDir(Path("d"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "rmdir(" + Path("d") + ")")) << s;
  ASSERT_TRUE(env->DeleteDir(Path("d/e")).ok());
  ASSERT_TRUE(env->DeleteDir(Path("d")).ok());
  EXPECT_FALSE(env->FileExists(Path("d")));
  EXPECT_EQ(env->DeleteDir(Path("d")).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(env->DeleteDir(Path("f")).ok());
  EXPECT_TRUE(env->FileExists(Path("f")));
}

TEST_F(EnvTest, DeleteRecursivelyRemovesATreeButNotWhatLinksPointTo) {
  Env* env = Env::Default();
  const std::string tree = Path("tree");
  ASSERT_TRUE(env->CreateDirs(JoinPath(tree, "a/b")).ok());
  ASSERT_TRUE(env->CreateDirs(JoinPath(tree, "empty")).ok());
  ASSERT_TRUE(Write(env, JoinPath(tree, "top"), "1").ok());
  ASSERT_TRUE(Write(env, JoinPath(tree, "a/mid"), "2").ok());
  ASSERT_TRUE(Write(env, JoinPath(tree, "a/b/deep"), "3").ok());
  // A link to a directory outside the tree: the link goes, the target stays.
  ASSERT_TRUE(env->CreateDirs(Path("outside")).ok());
  ASSERT_TRUE(Write(env, Path("outside/keep"), "k").ok());
  ASSERT_EQ(::symlink(Path("outside").c_str(), JoinPath(tree, "a/link").c_str()), 0);
  EXPECT_FALSE(env->IsDirectory(JoinPath(tree, "a/link")).value());

  ASSERT_TRUE(DeleteRecursively(env, tree).ok());
  EXPECT_FALSE(env->FileExists(tree));
  EXPECT_EQ(Read(Path("outside/keep")), "k");

  absl::Status s = DeleteRecursively(env, tree);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), tree)) << s;
  // A file is not a directory to delete recursively.
  ASSERT_TRUE(Write(env, Path("f"), "x").ok());
  s = DeleteRecursively(env, Path("f"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), Path("f"))) << s;
  EXPECT_TRUE(env->FileExists(Path("f")));
}

TEST_F(EnvTest, InjectedDeleteFailuresNameThePath) {
  FaultInjectingEnv env(Env::Default());
  const std::string tree = Path("tree");
  ASSERT_TRUE(env.CreateDirs(JoinPath(tree, "sub")).ok());
  ASSERT_TRUE(Write(&env, JoinPath(tree, "sub/f"), "x").ok());
  EXPECT_TRUE(env.IsDirectory(tree).value());

  FaultInjectingEnv::Faults f;
  f.delete_errno = EACCES;
  env.SetFaults(f);
  absl::Status s = DeleteRecursively(&env, tree);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "unlink(" + JoinPath(tree, "sub/f") + ")")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "[injected]")) << s;
  EXPECT_EQ(env.DeleteDir(JoinPath(tree, "sub")).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Read(JoinPath(tree, "sub/f")), "x");

  env.ClearFaults();
  ASSERT_TRUE(DeleteRecursively(&env, tree).ok());
  EXPECT_TRUE(Entries().empty());
}

}  // namespace
}  // namespace weft
