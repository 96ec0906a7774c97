// UploadWriter: writes an uploaded dataset's files (uploaded_dataset.h) into
// a fresh temporary directory under a root, `<root>/.tmp-<64 random bits>`,
// hashing them as they arrive, so nothing is ever held whole in memory.
// Finish checks what arrived; Commit renames the directory to `<root>/<id>`
// in one step, so a dataset directory is either absent or complete and
// checked. Destroying an uncommitted writer removes its directory and every
// file in it: a failed transfer leaves nothing behind.
//
// Sizes are checked before anything is written: a file may not receive more
// bytes than it declared, and Finish refuses one that received fewer.
//
// Thread-safety: not thread-safe; one owner feeds it.
#ifndef WEFT_RUNTIME_DATA_UPLOAD_WRITER_H_
#define WEFT_RUNTIME_DATA_UPLOAD_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/confined_root.h"
#include "common/sha256.h"
#include "runtime/data/uploaded_dataset.h"

namespace weft {
namespace data {

// What a finished upload holds.
struct UploadSummary {
  std::string id;
  int64_t bytes = 0;
  int64_t train_examples = 0;
  int64_t test_examples = 0;  // 0 without a test split
  std::vector<UploadedFileDigest> files;  // in the order they arrived
};

class UploadWriter {
 public:
  static absl::StatusOr<std::unique_ptr<UploadWriter>> Create(const ConfinedRoot& root);
  ~UploadWriter();
  UploadWriter(const UploadWriter&) = delete;
  UploadWriter& operator=(const UploadWriter&) = delete;

  // Starts file `name` of `size` bytes. INVALID_ARGUMENT naming the file
  // for an unknown or repeated name, a negative size, or while the previous
  // file has not received all its bytes.
  absl::Status StartFile(absl::string_view name, int64_t size);
  // The next bytes of the current file. INVALID_ARGUMENT naming the file
  // when no file was started or `data` runs past its declared size.
  absl::Status Append(absl::string_view data);
  // Bytes received so far (all files), and those declared.
  int64_t bytes() const { return bytes_; }
  int64_t declared() const { return declared_; }

  // Checks the whole: every file complete; train_images and train_labels
  // present, test_images and test_labels both or neither; each images file
  // an IDX file of rank >= 2, each labels file of rank 1 (uint8), their
  // counts equal, an uncompressed file exactly as long as its header says.
  // INVALID_ARGUMENT naming the file otherwise.
  absl::StatusOr<UploadSummary> Finish();
  // Writes a file of the writer's own (not part of the id) beside the
  // dataset's files, 0600. REQUIRES: Finish succeeded, before Commit.
  absl::Status WriteExtra(absl::string_view name, absl::string_view contents);
  // Renames the directory to `<root>/<id>`. False when a dataset with that
  // id is there already: this copy is removed and that one kept.
  // REQUIRES: Finish succeeded.
  absl::StatusOr<bool> Commit();

 private:
  UploadWriter(ConfinedRoot root, std::string tmp) : root_(std::move(root)), tmp_(std::move(tmp)) {}
  absl::Status CloseCurrent();
  absl::Status CheckSplit(bool train, UploadSummary* summary) const;
  void RemoveAll();

  const ConfinedRoot root_;
  const std::string tmp_;          // the directory's name under root_
  std::vector<std::string> made_;  // files created in it
  bool present_[kNumUploadFiles] = {};
  int64_t sizes_[kNumUploadFiles] = {};
  std::vector<UploadedFileDigest> done_;
  int current_ = -1;  // index of the file receiving bytes
  int fd_ = -1;
  int64_t current_left_ = 0;
  Sha256 hash_;
  int64_t bytes_ = 0;
  int64_t declared_ = 0;
  std::string id_;  // set by Finish
  bool committed_ = false;
};

// Removes the `.tmp-*` directories an interrupted transfer left under
// `root` (a daemon calls it once at start, before serving).
void RemoveStaleUploads(const ConfinedRoot& root);

// The files of a stored dataset, in canonical order, with their sizes.
// NOT_FOUND when `<root>/<id>` is not there.
absl::StatusOr<std::vector<UploadedFileDigest>> StoredUploadFiles(const ConfinedRoot& root, const std::string& id);

}  // namespace data
}  // namespace weft

#endif  // WEFT_RUNTIME_DATA_UPLOAD_WRITER_H_
