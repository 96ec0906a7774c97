// FailingReadEnv: an Env whose files fail every read that reaches past a
// given byte offset, for tests of the data readers' I/O errors part-way
// through a file (FaultInjectingEnv fails opens, not reads). It also counts
// the bytes read, so a test can check that a reader left payloads unread.
// An injected error reads like the POSIX Env's, with " [injected]".
// Test-only.
//
// Thread-safety: thread-safe; `base` outlives it and every file it opened.
#ifndef WEFT_RUNTIME_DATA_FAILING_READ_ENV_H_
#define WEFT_RUNTIME_DATA_FAILING_READ_ENV_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/env.h"

namespace weft {
namespace data {
namespace testing {

class FailingReadEnv final : public EnvWrapper {
 public:
  explicit FailingReadEnv(Env* base) : EnvWrapper(base) {}

  // Reads of bytes at or past `offset` fail (EIO); max(): none do.
  void FailReadsFrom(uint64_t offset) { fail_from_.store(offset); }
  int64_t bytes_read() const { return bytes_read_.load(); }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override {
    absl::StatusOr<std::unique_ptr<RandomAccessFile>> file = base()->NewRandomAccessFile(path);
    if (!file.ok()) return file.status();
    return std::unique_ptr<RandomAccessFile>(new File(this, *std::move(file)));
  }

 private:
  class File final : public RandomAccessFile {
   public:
    File(FailingReadEnv* env, std::unique_ptr<RandomAccessFile> base) : env_(env), base_(std::move(base)) {}
    absl::Status Read(uint64_t offset, size_t n, char* dst) const override {
      if (n > 0 && offset + n > env_->fail_from_.load()) {
        return absl::DataLossError(
            absl::StrCat("pread(", base_->path(), ") at ", offset, ": Input/output error [injected]"));
      }
      env_->bytes_read_ += static_cast<int64_t>(n);
      return base_->Read(offset, n, dst);
    }
    uint64_t Size() const override { return base_->Size(); }
    const std::string& path() const override { return base_->path(); }

   private:
    FailingReadEnv* const env_;
    const std::unique_ptr<RandomAccessFile> base_;
  };

  std::atomic<uint64_t> fail_from_{std::numeric_limits<uint64_t>::max()};
  std::atomic<int64_t> bytes_read_{0};
};

}  // namespace testing
}  // namespace data
}  // namespace weft

#endif  // WEFT_RUNTIME_DATA_FAILING_READ_ENV_H_
