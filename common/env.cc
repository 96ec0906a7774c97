#include "common/env.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"

namespace weft {
namespace {

// "call(path): strerror", with the code errno maps to.
absl::Status PosixError(absl::string_view call, absl::string_view path, int err) {
  return absl::ErrnoToStatus(err, absl::StrCat(call, "(", path, ")"));
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status Append(absl::string_view data) override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("write(", path_, "): file is closed"));
    const char* p = data.data();
    size_t left = data.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        return PosixError("write", path_, errno);
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("fsync(", path_, "): file is closed"));
    if (::fsync(fd_) != 0) return PosixError("fsync", path_, errno);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (fd_ < 0) return absl::OkStatus();
    const int fd = fd_;
    fd_ = -1;
    // Linux closes the descriptor even when close fails; never retry.
    if (::close(fd) != 0) return PosixError("close", path_, errno);
    return absl::OkStatus();
  }

  const std::string& path() const override { return path_; }

 private:
  const std::string path_;
  int fd_;
};

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd, uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  absl::Status Read(uint64_t offset, size_t n, char* dst) const override {
    uint64_t at = offset;
    size_t left = n;
    while (left > 0) {
      const ssize_t got = ::pread(fd_, dst, left, static_cast<off_t>(at));
      if (got < 0) {
        if (errno == EINTR) continue;
        return PosixError("pread", path_, errno);
      }
      if (got == 0) {
        return absl::OutOfRangeError(absl::StrCat("pread(", path_, "): file ends at byte ", at, ", wanted ", n,
                                                  " bytes at offset ", offset));
      }
      dst += got;
      at += static_cast<uint64_t>(got);
      left -= static_cast<size_t>(got);
    }
    return absl::OkStatus();
  }

  uint64_t Size() const override { return size_; }
  const std::string& path() const override { return path_; }

 private:
  const std::string path_;
  const int fd_;
  const uint64_t size_;
};

class PosixEnv final : public Env {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    // Private: files hold weights, job records and checkpoints.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return PosixError("open for write", path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return PosixError("open for read", path, errno);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return PosixError("fstat", path, err);
    }
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat("open for read(", path, "): is a directory"));
    }
    return std::unique_ptr<RandomAccessFile>(new PosixRandomAccessFile(path, fd, static_cast<uint64_t>(st.st_size)));
  }

  bool FileExists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  absl::StatusOr<uint64_t> GetFileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return PosixError("stat", path, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return PosixError("opendir", dir, errno);
    std::vector<std::string> names;
    errno = 0;
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
    }
    const int err = errno;
    ::closedir(d);
    if (err != 0) return PosixError("readdir", dir, err);
    std::sort(names.begin(), names.end());
    return names;
  }

  absl::Status DeleteFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return PosixError("unlink", path, errno);
    return absl::OkStatus();
  }

  absl::Status DeleteDir(const std::string& dir) override {
    if (::rmdir(dir.c_str()) != 0) return PosixError("rmdir", dir, errno);
    return absl::OkStatus();
  }

  absl::StatusOr<bool> IsDirectory(const std::string& path) override {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return PosixError("lstat", path, errno);
    return S_ISDIR(st.st_mode);
  }

  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return PosixError("rename", absl::StrCat(from, " -> ", to), errno);
    return absl::OkStatus();
  }

  absl::Status CreateDirs(const std::string& dir) override {
    if (dir.empty()) return absl::InvalidArgumentError("mkdir(): empty directory name");
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) return absl::OkStatus();
      return absl::FailedPreconditionError(absl::StrCat("mkdir(", dir, "): exists and is not a directory"));
    }
    const std::string parent = DirName(dir);
    if (parent != dir) {
      absl::Status s = CreateDirs(parent);
      if (!s.ok()) return s;
    }
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return PosixError("mkdir", dir, errno);
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PosixError("open dir", dir, errno);
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return PosixError("fsync dir", dir, err);
    return absl::OkStatus();
  }

  int64_t NowMicros() override {
    struct timeval tv;
    ::gettimeofday(&tv, nullptr);
    return static_cast<int64_t>(tv.tv_sec) * 1000000 + tv.tv_usec;
  }
};

}  // namespace

Env* Env::Default() {
  static Env* const env = new PosixEnv();
  return env;
}

std::string DirName(absl::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  const size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos) return ".";
  if (slash == 0) return "/";
  absl::string_view dir = path.substr(0, slash);
  while (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
  return std::string(dir);
}

std::string BaseName(absl::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  const size_t slash = path.rfind('/');
  return std::string(slash == absl::string_view::npos ? path : path.substr(slash + 1));
}

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

absl::Status WriteFileAtomically(Env* env, const std::string& path, absl::Span<const absl::string_view> pieces) {
  if (path.empty() || path.back() == '/') {
    return absl::InvalidArgumentError(absl::StrCat("write '", path, "': not a file path"));
  }
  const std::string tmp = absl::StrCat(path, ".tmp.", absl::Hex(absl::Uniform<uint32_t>(absl::BitGen())));
  auto file = env->NewWritableFile(tmp);
  if (!file.ok()) return file.status();
  absl::Status s;
  for (absl::string_view piece : pieces) {
    s = (*file)->Append(piece);
    if (!s.ok()) break;
  }
  if (s.ok()) s = (*file)->Sync();
  // Close even after an error, so the temp file can be deleted.
  absl::Status closed = (*file)->Close();
  if (s.ok()) s = closed;
  file->reset();
  if (s.ok()) s = env->RenameFile(tmp, path);
  if (!s.ok()) {
    env->DeleteFile(tmp).IgnoreError();  // best effort; the error that matters is s
    return s;
  }
  // The rename is done; without the directory's fsync a crash could still
  // undo it, so report the failure (the new file is in place either way).
  return env->SyncDir(DirName(path));
}

absl::StatusOr<std::string> ReadFileToString(Env* env, const std::string& path) {
  auto file = env->NewRandomAccessFile(path);
  if (!file.ok()) return file.status();
  std::string out((*file)->Size(), '\0');
  absl::Status s = (*file)->Read(0, out.size(), out.data());
  if (!s.ok()) return s;
  return out;
}

namespace {

// Deletes the directory `dir` (known to be one) and its contents.
absl::Status DeleteTree(Env* env, const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> names = env->ListDirectory(dir);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    const std::string path = JoinPath(dir, name);
    absl::StatusOr<bool> is_dir = env->IsDirectory(path);
    if (!is_dir.ok()) return is_dir.status();
    absl::Status s = *is_dir ? DeleteTree(env, path) : env->DeleteFile(path);
    if (!s.ok()) return s;
  }
  return env->DeleteDir(dir);
}

}  // namespace

absl::Status DeleteRecursively(Env* env, const std::string& dir) {
  absl::StatusOr<bool> is_dir = env->IsDirectory(dir);
  if (!is_dir.ok()) return is_dir.status();
  if (!*is_dir) {
    return absl::FailedPreconditionError(absl::StrCat("delete recursively(", dir, "): not a directory"));
  }
  return DeleteTree(env, dir);
}

}  // namespace weft
