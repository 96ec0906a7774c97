// Env: the file system and clock as weft's durable state sees them.
//
// Checkpoints and the job store reach the disk only through an Env, so tests
// can swap in one that fails (FaultInjectingEnv in common/fault_injecting_env.h)
// and check that a failed write never leaves a half-written file in place of a
// good one. `Env::Default()` is the POSIX implementation.
//
// Every error is an absl::Status whose message names the path and the failing
// call, with the errno text: "open(/ckpt/shard-0.tmp.3f2a) for write: No space
// left on device". The code follows the errno (ENOENT -> NOT_FOUND, ENOSPC ->
// RESOURCE_EXHAUSTED, EACCES -> PERMISSION_DENIED, ...); a read past the end
// of a file is OUT_OF_RANGE.
//
// WriteFileAtomically is the one way weft replaces a file: write a temp file
// beside it, fsync, close, rename over the target, fsync the directory. A
// crash or an error at any point leaves the old file (or none), never a torn
// one.
//
// Thread-safety: an Env is thread-safe. A WritableFile or RandomAccessFile is
// used by one thread at a time (RandomAccessFile::Read is also safe
// concurrently on the POSIX Env, which uses pread).
#ifndef WEFT_COMMON_ENV_H_
#define WEFT_COMMON_ENV_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace weft {

// A file open for appending. Data reaches the disk only after Sync; Close
// does not sync. The destructor closes a file that was not closed, ignoring
// errors.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes all of `data` (retrying partial writes) or fails.
  virtual absl::Status Append(absl::string_view data) = 0;
  virtual absl::Status Sync() = 0;
  virtual absl::Status Close() = 0;
  virtual const std::string& path() const = 0;
};

// A file open for positional reads.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads exactly `n` bytes at `offset` into `dst`; OUT_OF_RANGE naming the
  // path when the file ends first.
  virtual absl::Status Read(uint64_t offset, size_t n, char* dst) const = 0;
  // The size when the file was opened.
  virtual uint64_t Size() const = 0;
  virtual const std::string& path() const = 0;
};

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide POSIX Env. Never deleted.
  static Env* Default();

  // Creates (or truncates) `path` for writing.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) = 0;

  virtual bool FileExists(const std::string& path) = 0;
  virtual absl::StatusOr<uint64_t> GetFileSize(const std::string& path) = 0;
  // Names of the entries in `dir` (not "." or ".."), sorted.
  virtual absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir) = 0;
  virtual absl::Status DeleteFile(const std::string& path) = 0;
  // Removes the empty directory `dir`; FAILED_PRECONDITION (ENOTEMPTY) when
  // it still has entries.
  virtual absl::Status DeleteDir(const std::string& dir) = 0;
  // Whether `path` is a directory, not following a symbolic link: a link to
  // a directory is not one (so DeleteRecursively removes the link, never
  // what it points to). NOT_FOUND when nothing is there.
  virtual absl::StatusOr<bool> IsDirectory(const std::string& path) = 0;
  // Atomically replaces `to` (same file system).
  virtual absl::Status RenameFile(const std::string& from, const std::string& to) = 0;
  // Creates `dir` and its missing parents; OK when it already exists as a
  // directory.
  virtual absl::Status CreateDirs(const std::string& dir) = 0;
  // Makes the directory's entries (a rename, a new file) durable.
  virtual absl::Status SyncDir(const std::string& dir) = 0;

  // Wall-clock time, microseconds since the Unix epoch.
  virtual int64_t NowMicros() = 0;
};

// An Env that forwards every call to `base`: derive from it and override only
// what changes (faults, a test's clock, file modes).
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* base) : base_(base) {}

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return base_->NewWritableFile(path);
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override {
    return base_->NewRandomAccessFile(path);
  }
  bool FileExists(const std::string& path) override { return base_->FileExists(path); }
  absl::StatusOr<uint64_t> GetFileSize(const std::string& path) override { return base_->GetFileSize(path); }
  absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir) override {
    return base_->ListDirectory(dir);
  }
  absl::Status DeleteFile(const std::string& path) override { return base_->DeleteFile(path); }
  absl::Status DeleteDir(const std::string& dir) override { return base_->DeleteDir(dir); }
  absl::StatusOr<bool> IsDirectory(const std::string& path) override { return base_->IsDirectory(path); }
  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    return base_->RenameFile(from, to);
  }
  absl::Status CreateDirs(const std::string& dir) override { return base_->CreateDirs(dir); }
  absl::Status SyncDir(const std::string& dir) override { return base_->SyncDir(dir); }
  int64_t NowMicros() override { return base_->NowMicros(); }

 protected:
  Env* base() const { return base_; }

 private:
  Env* const base_;
};

// The directory part of `path` ("/a/b" -> "/a", "b" -> ".", "/b" -> "/").
std::string DirName(absl::string_view path);
// The last component of `path` ("/a/b" -> "b").
std::string BaseName(absl::string_view path);
// "a" + "/" + "b", without doubling a slash.
std::string JoinPath(absl::string_view dir, absl::string_view name);

// Replaces `path` with the concatenation of `pieces`: writes a temp file in
// the same directory (path + ".tmp." + random), appends, fsyncs, closes,
// renames it over `path` and fsyncs the directory. On any error the temp file
// is deleted, `path` keeps its old contents (or stays absent), and the error
// names the failing call and path.
absl::Status WriteFileAtomically(Env* env, const std::string& path, absl::Span<const absl::string_view> pieces);

// The whole file as a string.
absl::StatusOr<std::string> ReadFileToString(Env* env, const std::string& path);

// Removes the directory `dir` and everything under it, through ListDirectory,
// DeleteFile and DeleteDir. Symbolic links inside are removed, not followed.
// FAILED_PRECONDITION when `dir` is not a directory (a file, a link), NOT_FOUND
// when it does not exist. Stops at the first error, which names the path and
// the call; what was deleted before it stays deleted.
absl::Status DeleteRecursively(Env* env, const std::string& dir);

}  // namespace weft

#endif  // WEFT_COMMON_ENV_H_
