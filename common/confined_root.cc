#include "common/confined_root.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/env.h"
#include "common/status_macros.h"

namespace weft {
namespace {

// Longest piece of a request's name quoted in an error message.
constexpr size_t kMaxQuotedBytes = 256;

// A request's name, quoted and C-escaped for an error message (control
// characters cannot forge log lines), cut short when long.
std::string Quote(absl::string_view name) {
  if (name.size() <= kMaxQuotedBytes) return absl::StrCat("\"", absl::CHexEscape(name), "\"");
  return absl::StrCat("\"", absl::CHexEscape(name.substr(0, kMaxQuotedBytes)), "\"... (", name.size(), " bytes)");
}

// Owns a descriptor; closes it when destroyed.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) : fd_(other.release()) {}
  ScopedFd& operator=(ScopedFd&& other) {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { reset(); }

  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset() {
    if (fd_ >= 0) ::close(fd_);  // Linux closes even when close fails
    fd_ = -1;
  }

 private:
  int fd_;
};

// Names what a walk was doing in its error messages: the whole name from
// the request, the root, and the prefix of the name up to the component at
// hand. Borrows both strings; lives for one call.
class WalkContext {
 public:
  WalkContext(absl::string_view root, absl::string_view relative) : root_(root), relative_(relative) {}

  absl::string_view root() const { return root_; }
  absl::string_view relative() const { return relative_; }

  // `"a/b" under root /r (resolving "a/b/c")`, naming `component` (a piece
  // of the name) by the prefix that ends with it.
  std::string Where(absl::string_view component) const { return Describe(Quote(Prefix(component)), component); }

  // The errno text of a failed `call` on `component`.
  absl::Status Errno(absl::string_view call, absl::string_view component, int err) const {
    return absl::ErrnoToStatus(err, Describe(absl::StrCat(call, "(", Quote(Prefix(component)), ")"), component));
  }

 private:
  absl::string_view Prefix(absl::string_view component) const {
    return relative_.substr(0, static_cast<size_t>(component.data() + component.size() - relative_.data()));
  }

  std::string Describe(absl::string_view head, absl::string_view component) const {
    std::string out = absl::StrCat(head, " under root ", root_);
    if (Prefix(component).size() != relative_.size()) absl::StrAppend(&out, " (resolving ", Quote(relative_), ")");
    return out;
  }

  const absl::string_view root_;
  const absl::string_view relative_;
};

// Article and name of a file type, for messages.
const char* TypeName(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "a special file";
}

absl::Status SymlinkError(const WalkContext& ctx, absl::string_view component) {
  return absl::PermissionDeniedError(
      absl::StrCat(ctx.Where(component), " is a symbolic link; links are not followed below the root"));
}

// OK for a regular file or a directory as the final component.
absl::Status CheckFinalType(const WalkContext& ctx, absl::string_view component, mode_t mode) {
  if (S_ISREG(mode) || S_ISDIR(mode)) return absl::OkStatus();
  if (S_ISLNK(mode)) return SymlinkError(ctx, component);
  return absl::PermissionDeniedError(
      absl::StrCat(ctx.Where(component), " is ", TypeName(mode), ", not a regular file or directory"));
}

// Why openat() of `name` in `dir_fd` failed with `err` (ELOOP or ENOTDIR
// under O_NOFOLLOW | O_DIRECTORY): a symbolic link, or not a directory.
absl::Status ExplainOpenDirFailure(const WalkContext& ctx, int dir_fd, const std::string& name,
                                   absl::string_view component, int err) {
  struct stat st;
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(st.st_mode)) return SymlinkError(ctx, component);
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(ctx.Where(component), " is ", S_ISREG(st.st_mode) ? "a regular file" : TypeName(st.st_mode),
                       ", not a directory"));
    }
  }
  return ctx.Errno("openat", component, err);
}

// Opens the directory `name` (one component) in `dir_fd` without following
// a link, creating it with mode 0700 when missing and `create`.
absl::StatusOr<ScopedFd> OpenSubdir(const WalkContext& ctx, int dir_fd, absl::string_view component, bool create) {
  const std::string name(component);
  constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::openat(dir_fd, name.c_str(), kDirFlags);
  if (fd < 0 && errno == ENOENT && create) {
    // Another thread may create it first; its directory is as good as ours.
    if (::mkdirat(dir_fd, name.c_str(), 0700) != 0 && errno != EEXIST) return ctx.Errno("mkdirat", component, errno);
    fd = ::openat(dir_fd, name.c_str(), kDirFlags);
  }
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP || err == ENOTDIR) return ExplainOpenDirFailure(ctx, dir_fd, name, component, err);
    return ctx.Errno("openat", component, err);
  }
  return ScopedFd(fd);
}

// Opens the directory that holds the last component of `relative` (already
// checked), walking from the root. Sets `*last` to that component.
absl::StatusOr<ScopedFd> WalkToParent(const WalkContext& ctx, bool create_dirs, absl::string_view* last) {
  const std::string root(ctx.root());
  const int root_fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open(", root, ") of the confined root"));
  ScopedFd dir(root_fd);
  const std::vector<absl::string_view> components = absl::StrSplit(ctx.relative(), '/');
  for (size_t i = 0; i + 1 < components.size(); ++i) {
    ASSIGN_OR_RETURN(dir, OpenSubdir(ctx, dir.get(), components[i], create_dirs));
  }
  *last = components.back();
  return dir;
}

}  // namespace

absl::StatusOr<ConfinedRoot> ConfinedRoot::Open(const std::string& root, bool create) {
  if (root.empty()) return absl::InvalidArgumentError("confined root: empty directory name");
  if (root.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("confined root ", Quote(root), ": contains a NUL byte"));
  }
  if (create) RETURN_IF_ERROR(CreatePrivateDirs(root));
  char* resolved = ::realpath(root.c_str(), nullptr);
  if (resolved == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("realpath(", root, ") of the confined root"));
  std::string canonical(resolved);
  ::free(resolved);
  struct stat st;
  if (::stat(canonical.c_str(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("stat(", canonical, ") of the confined root"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("confined root ", root, " (", canonical, ") is not a directory"));
  }
  return ConfinedRoot(std::move(canonical));
}

absl::Status ConfinedRoot::CheckRelative(absl::string_view relative) {
  auto refuse = [relative](absl::string_view rule) {
    return absl::InvalidArgumentError(absl::StrCat("file name ", Quote(relative), " is not allowed: ", rule));
  };
  if (relative.empty()) return refuse("it is empty");
  if (relative.size() > kMaxRelativeBytes) {
    return refuse(absl::StrCat("it is ", relative.size(), " bytes long, more than ", kMaxRelativeBytes));
  }
  if (relative.find('\0') != absl::string_view::npos) return refuse("it contains a NUL byte");
  if (relative.front() == '/') return refuse("it is absolute; names are relative to the root");
  size_t count = 0;
  for (absl::string_view component : absl::StrSplit(relative, '/')) {
    if (++count > kMaxComponents) return refuse(absl::StrCat("it has more than ", kMaxComponents, " components"));
    if (component.empty()) return refuse("it has an empty component (\"//\" or a trailing \"/\")");
    if (component == ".") return refuse("it has a \".\" component");
    if (component == "..") return refuse("it has a \"..\" component");
    if (component.size() > kMaxComponentBytes) {
      return refuse(absl::StrCat("a component is ", component.size(), " bytes long, more than ", kMaxComponentBytes));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ConfinedRoot::Relativize(absl::string_view path_or_relative) const {
  if (path_or_relative.empty() || path_or_relative.front() != '/') {
    RETURN_IF_ERROR(CheckRelative(path_or_relative));
    return std::string(path_or_relative);
  }
  if (path_or_relative.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("path ", Quote(path_or_relative), " contains a NUL byte"));
  }
  std::vector<absl::string_view> components;
  for (absl::string_view component : absl::StrSplit(path_or_relative, '/', absl::SkipEmpty())) {
    if (component == ".") continue;
    if (component == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("path ", Quote(path_or_relative), " is not allowed: it has a \"..\" component"));
    }
    components.push_back(component);
  }
  const std::vector<absl::string_view> root = absl::StrSplit(path_, '/', absl::SkipEmpty());
  bool inside = components.size() >= root.size();
  for (size_t i = 0; inside && i < root.size(); ++i) inside = components[i] == root[i];
  if (!inside) {
    return absl::PermissionDeniedError(
        absl::StrCat("path ", Quote(path_or_relative), " is outside the root ", path_));
  }
  if (components.size() == root.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("path ", Quote(path_or_relative), " names the root ", path_, " itself, not a file under it"));
  }
  std::string relative = absl::StrJoin(components.begin() + root.size(), components.end(), "/");
  absl::Status s = CheckRelative(relative);
  if (!s.ok()) return Annotate(s, absl::StrCat("path ", Quote(path_or_relative)));
  return relative;
}

absl::StatusOr<std::string> ConfinedRoot::Resolve(absl::string_view relative, bool create_dirs) const {
  RETURN_IF_ERROR(CheckRelative(relative));
  const WalkContext ctx(path_, relative);
  absl::string_view last;
  ASSIGN_OR_RETURN(ScopedFd dir, WalkToParent(ctx, create_dirs, &last));
  struct stat st;
  if (::fstatat(dir.get(), std::string(last).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    RETURN_IF_ERROR(CheckFinalType(ctx, last, st.st_mode));
  } else if (errno != ENOENT) {
    return ctx.Errno("fstatat", last, errno);
  }
  return JoinPath(path_, relative);
}

absl::StatusOr<int> ConfinedRoot::OpenFile(absl::string_view relative, int flags, mode_t mode,
                                           bool create_dirs) const {
  RETURN_IF_ERROR(CheckRelative(relative));
  const WalkContext ctx(path_, relative);
  absl::string_view last;
  ASSIGN_OR_RETURN(ScopedFd dir, WalkToParent(ctx, create_dirs, &last));
  const std::string name(last);
  // Refuse links and special files before opening them at all: opening a
  // device can have side effects.
  struct stat st;
  if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    RETURN_IF_ERROR(CheckFinalType(ctx, last, st.st_mode));
  } else if (errno != ENOENT) {
    return ctx.Errno("fstatat", last, errno);
  }
  // O_NONBLOCK so that a FIFO swapped in since the check cannot block the
  // open; the fstat below refuses it.
  const int fd = ::openat(dir.get(), name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, mode);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP && ::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
      return SymlinkError(ctx, last);
    }
    return ctx.Errno("openat", last, err);
  }
  ScopedFd file(fd);
  if (::fstat(file.get(), &st) != 0) return ctx.Errno("fstat", last, errno);
  RETURN_IF_ERROR(CheckFinalType(ctx, last, st.st_mode));
  if ((flags & O_NONBLOCK) == 0) {
    const int fl = ::fcntl(file.get(), F_GETFL);
    if (fl < 0 || ::fcntl(file.get(), F_SETFL, fl & ~O_NONBLOCK) != 0) return ctx.Errno("fcntl", last, errno);
  }
  return file.release();
}

absl::Status CreatePrivateDirs(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("mkdir(): empty directory name");
  if (dir.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("mkdir(", Quote(dir), "): contains a NUL byte"));
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("mkdir(", dir, "): exists and is not a directory"));
  }
  if (errno != ENOENT) return absl::ErrnoToStatus(errno, absl::StrCat("stat(", dir, ")"));
  const std::string parent = DirName(dir);
  if (parent != dir) RETURN_IF_ERROR(CreatePrivateDirs(parent));
  if (::mkdir(dir.c_str(), 0700) != 0) {
    const int err = errno;
    // Created by someone else meanwhile: fine if it is a directory.
    if (err == EEXIST && ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return absl::OkStatus();
    return absl::ErrnoToStatus(err, absl::StrCat("mkdir(", dir, ")"));
  }
  return absl::OkStatus();
}

}  // namespace weft
