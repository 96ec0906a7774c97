// FaultInjectingEnv: an Env that forwards to another and fails on command,
// for tests of everything that writes durable state (checkpoint shards, the
// manifest, the job store).
//
//   FaultInjectingEnv env(Env::Default());
//   FaultInjectingEnv::Faults f;
//   f.space_left = 100;            // the disk fills after 100 more bytes
//   env.SetFaults(f);
//   EXPECT_EQ(WriteShard(&env, ...).code(), absl::StatusCode::kResourceExhausted);
//
// Faults count from the last SetFaults: `fail_append_at = 3` fails the third
// Append made through any file opened by this Env. An injected error looks
// like the POSIX Env's (ErrnoToStatus of the errno, the call and the path),
// with " [injected]" appended, so tests can tell it from a real one.
//
// Thread-safety: thread-safe; files it opens share the Env's counters.
// `base` (borrowed) outlives it and every file it opened.
#ifndef WEFT_COMMON_FAULT_INJECTING_ENV_H_
#define WEFT_COMMON_FAULT_INJECTING_ENV_H_

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/env.h"

namespace weft {

class FaultInjectingEnv final : public EnvWrapper {
 public:
  struct Faults {
    // The Nth Append (1-based) fails with `append_errno`, writing nothing;
    // 0: none.
    int fail_append_at = 0;
    int append_errno = EIO;
    // Bytes that still fit on the "disk", over all files; an Append past it
    // writes the part that fits (a short write) and then fails with ENOSPC.
    // -1: unlimited.
    int64_t space_left = -1;
    // With space_left: the short write reports success instead (a disk or
    // network file system that loses data silently). The file is truncated.
    bool silent_short_writes = false;
    // Nonzero: every call of that kind fails with this errno.
    int open_for_write_errno = 0;
    int sync_errno = 0;
    int close_errno = 0;
    int rename_errno = 0;
    int sync_dir_errno = 0;
    int open_for_read_errno = 0;
    int delete_errno = 0;  // DeleteFile and DeleteDir
  };

  explicit FaultInjectingEnv(Env* base) : EnvWrapper(base) {}

  // Replaces the faults and resets the counters.
  void SetFaults(const Faults& faults);
  void ClearFaults() { SetFaults(Faults()); }

  // Since the last SetFaults.
  int appends() const;
  int64_t bytes_written() const;
  int renames() const;
  // Paths opened for writing, in order (temp files included).
  std::vector<std::string> written_paths() const;

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override;
  absl::Status DeleteFile(const std::string& path) override;
  absl::Status DeleteDir(const std::string& dir) override;
  absl::Status RenameFile(const std::string& from, const std::string& to) override;
  absl::Status SyncDir(const std::string& dir) override;

 private:
  class File;
  friend class File;

  // How much of an Append of `n` bytes to write, and the error to return
  // after writing it (OK: all of it, successfully).
  absl::Status PlanAppend(const std::string& path, size_t n, size_t* write);
  int ErrnoFor(int Faults::*field) const;

  mutable absl::Mutex mu_;
  Faults faults_ ABSL_GUARDED_BY(mu_);
  int appends_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int renames_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> written_paths_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft

#endif  // WEFT_COMMON_FAULT_INJECTING_ENV_H_
