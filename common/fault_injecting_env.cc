#include "common/fault_injecting_env.h"

#include <errno.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

absl::Status Injected(int err, absl::string_view call, absl::string_view path) {
  return absl::ErrnoToStatus(err, absl::StrCat(call, "(", path, ") [injected]"));
}

}  // namespace

// Forwards to the base Env's file, consulting the Env before each call.
class FaultInjectingEnv::File final : public WritableFile {
 public:
  File(FaultInjectingEnv* env, std::unique_ptr<WritableFile> base) : env_(env), base_(std::move(base)) {}

  absl::Status Append(absl::string_view data) override {
    size_t write = 0;
    absl::Status injected = env_->PlanAppend(path(), data.size(), &write);
    if (write > 0) {
      absl::Status s = base_->Append(data.substr(0, write));
      if (!s.ok()) return s;
    }
    return injected;
  }

  absl::Status Sync() override {
    if (int err = env_->ErrnoFor(&Faults::sync_errno)) return Injected(err, "fsync", path());
    return base_->Sync();
  }

  absl::Status Close() override {
    absl::Status s = base_->Close();  // really close, so the file can be deleted
    if (int err = env_->ErrnoFor(&Faults::close_errno)) return Injected(err, "close", path());
    return s;
  }

  const std::string& path() const override { return base_->path(); }

 private:
  FaultInjectingEnv* const env_;
  std::unique_ptr<WritableFile> base_;
};

void FaultInjectingEnv::SetFaults(const Faults& faults) {
  absl::MutexLock lock(&mu_);
  faults_ = faults;
  appends_ = 0;
  bytes_ = 0;
  renames_ = 0;
  written_paths_.clear();
}

int FaultInjectingEnv::appends() const {
  absl::MutexLock lock(&mu_);
  return appends_;
}

int64_t FaultInjectingEnv::bytes_written() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

int FaultInjectingEnv::renames() const {
  absl::MutexLock lock(&mu_);
  return renames_;
}

std::vector<std::string> FaultInjectingEnv::written_paths() const {
  absl::MutexLock lock(&mu_);
  return written_paths_;
}

int FaultInjectingEnv::ErrnoFor(int Faults::*field) const {
  absl::MutexLock lock(&mu_);
  return faults_.*field;
}

absl::Status FaultInjectingEnv::PlanAppend(const std::string& path, size_t n, size_t* write) {
  absl::MutexLock lock(&mu_);
  ++appends_;
  if (faults_.fail_append_at > 0 && appends_ == faults_.fail_append_at) {
    *write = 0;
    return Injected(faults_.append_errno, "write", path);
  }
  if (faults_.space_left >= 0 && bytes_ + static_cast<int64_t>(n) > faults_.space_left) {
    *write = static_cast<size_t>(faults_.space_left - bytes_);
    bytes_ = faults_.space_left;
    return faults_.silent_short_writes ? absl::OkStatus() : Injected(ENOSPC, "write", path);
  }
  *write = n;
  bytes_ += static_cast<int64_t>(n);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultInjectingEnv::NewWritableFile(const std::string& path) {
  {
    absl::MutexLock lock(&mu_);
    written_paths_.push_back(path);
    if (faults_.open_for_write_errno != 0) return Injected(faults_.open_for_write_errno, "open for write", path);
  }
  auto file = base()->NewWritableFile(path);
  if (!file.ok()) return file.status();
  return std::unique_ptr<WritableFile>(new File(this, *std::move(file)));
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> FaultInjectingEnv::NewRandomAccessFile(const std::string& path) {
  if (int err = ErrnoFor(&Faults::open_for_read_errno)) return Injected(err, "open for read", path);
  return base()->NewRandomAccessFile(path);
}

absl::Status FaultInjectingEnv::DeleteFile(const std::string& path) {
  if (int err = ErrnoFor(&Faults::delete_errno)) return Injected(err, "unlink", path);
  return base()->DeleteFile(path);
}

absl::Status FaultInjectingEnv::DeleteDir(const std::string& dir) {
  if (int err = ErrnoFor(&Faults::delete_errno)) return Injected(err, "rmdir", dir);
  return base()->DeleteDir(dir);
}

absl::Status FaultInjectingEnv::RenameFile(const std::string& from, const std::string& to) {
  {
    absl::MutexLock lock(&mu_);
    if (faults_.rename_errno != 0) return Injected(faults_.rename_errno, "rename", absl::StrCat(from, " -> ", to));
    ++renames_;
  }
  return base()->RenameFile(from, to);
}

absl::Status FaultInjectingEnv::SyncDir(const std::string& dir) {
  if (int err = ErrnoFor(&Faults::sync_dir_errno)) return Injected(err, "fsync dir", dir);
  return base()->SyncDir(dir);
}

}  // namespace weft
