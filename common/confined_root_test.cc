#include "common/confined_root.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

// Sets the process umask for a scope.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : old_(::umask(mask)) {}
  ~ScopedUmask() { ::umask(old_); }

 private:
  const mode_t old_;
};

std::string RealPath(const std::string& path) {
  char* p = ::realpath(path.c_str(), nullptr);
  EXPECT_NE(p, nullptr) << path;
  if (p == nullptr) return "";
  std::string out(p);
  ::free(p);
  return out;
}

mode_t PermissionsOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

void WriteFile(const std::string& path, const std::string& contents) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::write(fd, contents.data(), contents.size()), static_cast<ssize_t>(contents.size()));
  ::close(fd);
}

std::string ReadFd(int fd) {
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

std::string ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path;
  if (fd < 0) return "";
  std::string out = ReadFd(fd);
  ::close(fd);
  return out;
}

int CountOpenFds() {
  DIR* d = ::opendir("/proc/self/fd");
  EXPECT_NE(d, nullptr);
  if (d == nullptr) return -1;
  int n = 0;
  while (::readdir(d) != nullptr) ++n;
  ::closedir(d);
  return n;
}

class ConfinedRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string templ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/confined_root_test.XXXXXX");
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    base_ = RealPath(templ);
    auto root = ConfinedRoot::Open(base_ + "/root");
    ASSERT_TRUE(root.ok()) << root.status();
    root_ = *root;
    ASSERT_EQ(::mkdir((base_ + "/outside").c_str(), 0755), 0);
    WriteFile(base_ + "/outside/secret", "secret");
  }

  // The path of `name` under the root.
  std::string In(const std::string& name) const { return root_->path() + "/" + name; }

  std::string base_;
  absl::optional<ConfinedRoot> root_;
};

TEST_F(ConfinedRootTest, OpenCanonicalisesAndCreates) {
  EXPECT_EQ(root_->path(), base_ + "/root");
  auto again = ConfinedRoot::Open(base_ + "/./root//", /*create=*/false);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->path(), base_ + "/root");

  auto nested = ConfinedRoot::Open(base_ + "/n1/n2/n3");
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_EQ(nested->path(), base_ + "/n1/n2/n3");

  auto fs_root = ConfinedRoot::Open("/", /*create=*/false);
  ASSERT_TRUE(fs_root.ok()) << fs_root.status();
  EXPECT_EQ(fs_root->path(), "/");
  EXPECT_EQ(fs_root->Relativize("/etc/x").value(), "etc/x");
}

TEST_F(ConfinedRootTest, OpenErrors) {
  EXPECT_EQ(ConfinedRoot::Open("").status().code(), absl::StatusCode::kInvalidArgument);

  const absl::Status missing = ConfinedRoot::Open(base_ + "/missing", /*create=*/false).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.message(), base_ + "/missing")) << missing;
  EXPECT_TRUE(absl::StrContains(missing.message(), "No such file or directory")) << missing;

  const absl::Status file = ConfinedRoot::Open(base_ + "/outside/secret").status();
  EXPECT_EQ(file.code(), absl::StatusCode::kFailedPrecondition) << file;
  EXPECT_TRUE(absl::StrContains(file.message(), "outside/secret")) << file;

  const absl::Status under_file = ConfinedRoot::Open(base_ + "/outside/secret/sub").status();
  EXPECT_FALSE(under_file.ok());
  EXPECT_TRUE(absl::StrContains(under_file.message(), "outside/secret/sub")) << under_file;
}

TEST_F(ConfinedRootTest, RootReachedThroughSymlink) {
  ASSERT_EQ(::symlink((base_ + "/root").c_str(), (base_ + "/alias").c_str()), 0);
  auto aliased = ConfinedRoot::Open(base_ + "/alias", /*create=*/false);
  ASSERT_TRUE(aliased.ok()) << aliased.status();
  EXPECT_EQ(aliased->path(), base_ + "/root");

  auto fd = aliased->OpenFile("d/f", O_WRONLY | O_CREAT | O_EXCL, 0600, /*create_dirs=*/true);
  ASSERT_TRUE(fd.ok()) << fd.status();
  ::close(*fd);
  EXPECT_TRUE(Exists(In("d/f")));
  EXPECT_EQ(aliased->Relativize(base_ + "/root/d/f").value(), "d/f");
  // The alias is not the canonical root, so lexically it lies outside.
  EXPECT_EQ(aliased->Relativize(base_ + "/alias/d/f").status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(ConfinedRootTest, NestedCreateAndResolve) {
  auto fd = root_->OpenFile("a/b/c.txt", O_WRONLY | O_CREAT | O_EXCL, 0600, /*create_dirs=*/true);
  ASSERT_TRUE(fd.ok()) << fd.status();
  ASSERT_EQ(::write(*fd, "hello", 5), 5);
  ::close(*fd);
  EXPECT_EQ(ReadFile(In("a/b/c.txt")), "hello");

  auto path = root_->Resolve("a/b/c.txt", /*create_dirs=*/false);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, In("a/b/c.txt"));

  auto read = root_->OpenFile("a/b/c.txt", O_RDONLY);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(ReadFd(*read), "hello");
  // The temporary O_NONBLOCK is cleared again.
  EXPECT_EQ(::fcntl(*read, F_GETFL) & O_NONBLOCK, 0);
  EXPECT_NE(::fcntl(*read, F_GETFD) & FD_CLOEXEC, 0);
  ::close(*read);

  // A directory as the last component is fine; a missing last one too.
  EXPECT_EQ(root_->Resolve("a/b", false).value(), In("a/b"));
  EXPECT_EQ(root_->Resolve("a/b/new.txt", false).value(), In("a/b/new.txt"));

  // Missing directories are created only when asked.
  const absl::Status missing = root_->Resolve("x/y/z", /*create_dirs=*/false).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_TRUE(absl::StrContains(missing.message(), "\"x\"")) << missing;
  EXPECT_TRUE(absl::StrContains(missing.message(), root_->path())) << missing;
  EXPECT_FALSE(Exists(In("x")));
  EXPECT_EQ(root_->Resolve("x/y/z", /*create_dirs=*/true).value(), In("x/y/z"));
  EXPECT_TRUE(Exists(In("x/y")));
  EXPECT_FALSE(Exists(In("x/y/z")));  // the last component is not created

  EXPECT_EQ(root_->OpenFile("nope", O_RDONLY).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ConfinedRootTest, CheckRelativeRefusesBadNames) {
  EXPECT_TRUE(ConfinedRoot::CheckRelative("a").ok());
  EXPECT_TRUE(ConfinedRoot::CheckRelative("a/b.c/d").ok());
  EXPECT_TRUE(ConfinedRoot::CheckRelative("..a/a../...").ok());

  struct Case {
    std::string name;
    std::string rule;
  };
  const Case cases[] = {
      {"..", "\"..\""},
      {"a/../b", "\"..\""},
      {"a/..", "\"..\""},
      {"/etc/passwd", "absolute"},
      {"", "empty"},
      {"a//b", "empty component"},
      {"a/", "empty component"},
      {"./a", "\".\""},
      {"a/./b", "\".\""},
      {std::string("a\0b", 3), "NUL"},
      {std::string(4097, 'x'), "4096"},
      {std::string(256, 'x'), "255"},
  };
  for (const Case& c : cases) {
    const absl::Status s = ConfinedRoot::CheckRelative(c.name);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_TRUE(absl::StrContains(s.message(), c.rule)) << s;
  }

  std::string deep;
  for (int i = 0; i < 65; ++i) absl::StrAppend(&deep, i == 0 ? "" : "/", "d");
  EXPECT_TRUE(absl::StrContains(ConfinedRoot::CheckRelative(deep).message(), "64 components"));
  EXPECT_TRUE(ConfinedRoot::CheckRelative(deep.substr(2)).ok());  // 64 components
  EXPECT_TRUE(ConfinedRoot::CheckRelative(std::string(255, 'x')).ok());

  // The name is quoted, escaped, in the message.
  const absl::Status s = ConfinedRoot::CheckRelative("evil/../x\ny");
  EXPECT_TRUE(absl::StrContains(s.message(), "\"evil/../x\\ny\"")) << s;
  EXPECT_FALSE(absl::StrContains(s.message(), "\n")) << s;

  // Resolve and OpenFile check first and touch nothing.
  EXPECT_EQ(root_->Resolve("../outside/secret", false).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(root_->OpenFile(base_ + "/outside/secret", O_RDONLY).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(root_->Resolve("a/../../x", true).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Exists(In("a")));
}

TEST_F(ConfinedRootTest, Relativize) {
  const std::string r = root_->path();
  EXPECT_EQ(root_->Relativize("a/b").value(), "a/b");
  EXPECT_EQ(root_->Relativize(r + "/a/b").value(), "a/b");
  EXPECT_EQ(root_->Relativize(r + "//./a/./b/").value(), "a/b");

  const absl::Status outside = root_->Relativize(base_ + "/outside/secret").status();
  EXPECT_EQ(outside.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(outside.message(),
            absl::StrCat("path \"", base_, "/outside/secret\" is outside the root ", r));
  // A sibling whose name starts with the root's is outside too.
  EXPECT_EQ(root_->Relativize(r + "x/f").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(root_->Relativize("/etc/passwd").status().code(), absl::StatusCode::kPermissionDenied);

  const absl::Status dotdot = root_->Relativize(r + "/../outside/secret").status();
  EXPECT_EQ(dotdot.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(dotdot.message(), "\"..\"")) << dotdot;
  EXPECT_EQ(root_->Relativize(r + "/a/../b").status().code(), absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(root_->Relativize(r).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(root_->Relativize(r + "/.").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(root_->Relativize("a/../b").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(root_->Relativize("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(root_->Relativize(r + "/" + std::string(256, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ConfinedRootTest, SymlinkToOutsideAsDirectoryIsRefused) {
  ASSERT_EQ(::mkdir(In("a").c_str(), 0700), 0);
  ASSERT_EQ(::symlink((base_ + "/outside").c_str(), In("a/link").c_str()), 0);

  const absl::Status resolved = root_->Resolve("a/link/secret", false).status();
  EXPECT_EQ(resolved.code(), absl::StatusCode::kPermissionDenied) << resolved;
  EXPECT_TRUE(absl::StrContains(resolved.message(), "\"a/link\"")) << resolved;
  EXPECT_TRUE(absl::StrContains(resolved.message(), "symbolic link")) << resolved;

  EXPECT_EQ(root_->OpenFile("a/link/secret", O_RDONLY).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(root_->OpenFile("a/link/new", O_WRONLY | O_CREAT | O_EXCL, 0600).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(root_->Resolve("a/link/sub/f", /*create_dirs=*/true).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(Exists(base_ + "/outside/new"));
  EXPECT_FALSE(Exists(base_ + "/outside/sub"));
}

TEST_F(ConfinedRootTest, SymlinkToOutsideAsFinalComponentIsRefused) {
  ASSERT_EQ(::symlink((base_ + "/outside/secret").c_str(), In("f").c_str()), 0);
  ASSERT_EQ(::symlink((base_ + "/outside/absent").c_str(), In("dangling").c_str()), 0);

  const absl::Status resolved = root_->Resolve("f", false).status();
  EXPECT_EQ(resolved.code(), absl::StatusCode::kPermissionDenied) << resolved;
  EXPECT_TRUE(absl::StrContains(resolved.message(), "\"f\"")) << resolved;

  EXPECT_EQ(root_->OpenFile("f", O_RDONLY).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(root_->OpenFile("f", O_WRONLY | O_TRUNC).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ReadFile(base_ + "/outside/secret"), "secret");

  EXPECT_EQ(root_->Resolve("dangling", false).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(root_->OpenFile("dangling", O_WRONLY | O_CREAT, 0600).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(Exists(base_ + "/outside/absent"));
}

TEST_F(ConfinedRootTest, SymlinkInsideRootIsRefusedToo) {
  ASSERT_EQ(::mkdir(In("real").c_str(), 0700), 0);
  WriteFile(In("real/f"), "x");
  ASSERT_EQ(::symlink("real", In("alias").c_str()), 0);
  ASSERT_EQ(::symlink("f", In("real/flink").c_str()), 0);

  EXPECT_EQ(root_->Resolve("alias/f", false).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(root_->Resolve("alias", false).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(root_->OpenFile("alias/f", O_RDONLY).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(root_->OpenFile("real/flink", O_RDONLY).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(root_->Resolve("real/f", false).value(), In("real/f"));
}

TEST_F(ConfinedRootTest, FileInPlaceOfDirectory) {
  WriteFile(In("plain"), "x");
  const absl::Status s = root_->Resolve("plain/f", /*create_dirs=*/true).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "\"plain\"")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "not a directory")) << s;
}

TEST_F(ConfinedRootTest, FifoAsFinalComponentIsRefused) {
  ASSERT_EQ(::mkfifo(In("fifo").c_str(), 0600), 0);
  const absl::Status resolved = root_->Resolve("fifo", false).status();
  EXPECT_EQ(resolved.code(), absl::StatusCode::kPermissionDenied) << resolved;
  EXPECT_TRUE(absl::StrContains(resolved.message(), "FIFO")) << resolved;
  // Would block forever without a writer if it were opened for real.
  EXPECT_EQ(root_->OpenFile("fifo", O_RDONLY).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(root_->OpenFile("fifo", O_WRONLY).status().code(), absl::StatusCode::kPermissionDenied);
  // A FIFO on the way is not a directory.
  EXPECT_EQ(root_->Resolve("fifo/f", false).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ConfinedRootTest, ModesUnderUmask022) {
  ScopedUmask mask(022);
  auto root = ConfinedRoot::Open(base_ + "/private/state");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(PermissionsOf(base_ + "/private"), 0700);
  EXPECT_EQ(PermissionsOf(base_ + "/private/state"), 0700);

  auto fd = root->OpenFile("ckpt/step-1/shard-0", O_WRONLY | O_CREAT | O_EXCL, 0600, /*create_dirs=*/true);
  ASSERT_TRUE(fd.ok()) << fd.status();
  ::close(*fd);
  EXPECT_EQ(PermissionsOf(root->path() + "/ckpt"), 0700);
  EXPECT_EQ(PermissionsOf(root->path() + "/ckpt/step-1"), 0700);
  EXPECT_EQ(PermissionsOf(root->path() + "/ckpt/step-1/shard-0"), 0600);

  ASSERT_TRUE(root->Resolve("logs/today/f", /*create_dirs=*/true).ok());
  EXPECT_EQ(PermissionsOf(root->path() + "/logs/today"), 0700);

  // Existing directories keep their mode.
  ASSERT_EQ(::mkdir((base_ + "/shared").c_str(), 0755), 0);
  ASSERT_TRUE(CreatePrivateDirs(base_ + "/shared/sub").ok());
  EXPECT_EQ(PermissionsOf(base_ + "/shared"), 0755);
  EXPECT_EQ(PermissionsOf(base_ + "/shared/sub"), 0700);
}

TEST_F(ConfinedRootTest, CreatePrivateDirsErrors) {
  EXPECT_EQ(CreatePrivateDirs("").code(), absl::StatusCode::kInvalidArgument);
  const absl::Status s = CreatePrivateDirs(base_ + "/outside/secret");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "outside/secret")) << s;
  EXPECT_TRUE(CreatePrivateDirs(base_ + "/outside").ok());
  EXPECT_TRUE(CreatePrivateDirs(base_ + "/p/q/").ok());
  EXPECT_TRUE(Exists(base_ + "/p/q"));
}

TEST_F(ConfinedRootTest, ExclusiveCreateOfExistingFileFails) {
  WriteFile(In("f"), "old");
  const absl::Status s = root_->OpenFile("f", O_WRONLY | O_CREAT | O_EXCL, 0600).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "\"f\"")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "File exists")) << s;
  EXPECT_EQ(ReadFile(In("f")), "old");
}

TEST_F(ConfinedRootTest, NoDescriptorLeaks) {
  ASSERT_EQ(::mkdir(In("a").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(In("a/b").c_str(), 0700), 0);
  ASSERT_EQ(::symlink((base_ + "/outside").c_str(), In("a/b/link").c_str()), 0);
  ASSERT_EQ(::mkfifo(In("a/b/fifo").c_str(), 0600), 0);
  WriteFile(In("a/b/f"), "x");

  const int before = CountOpenFds();
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(root_->Resolve("a/b/link/secret", false).ok());
    EXPECT_FALSE(root_->Resolve("a/b/link", false).ok());
    EXPECT_FALSE(root_->Resolve("a/b/fifo", false).ok());
    EXPECT_FALSE(root_->Resolve("a/b/f/g", false).ok());
    EXPECT_FALSE(root_->Resolve("a/missing/g", false).ok());
    EXPECT_FALSE(root_->OpenFile("a/b/link/secret", O_RDONLY).ok());
    EXPECT_FALSE(root_->OpenFile("a/b/fifo", O_RDONLY).ok());
    EXPECT_FALSE(root_->OpenFile("a/b/f", O_WRONLY | O_CREAT | O_EXCL).ok());
    EXPECT_FALSE(root_->OpenFile("a/b/missing", O_RDONLY).ok());
    EXPECT_TRUE(root_->Resolve("a/b/f", false).ok());
    EXPECT_TRUE(root_->Resolve(absl::StrCat("c/", i, "/d"), true).ok());
    auto fd = root_->OpenFile("a/b/f", O_RDONLY);
    ASSERT_TRUE(fd.ok()) << fd.status();
    ::close(*fd);
  }
  EXPECT_EQ(CountOpenFds(), before);
}

}  // namespace
}  // namespace weft
