// Uploaded datasets: IDX files a client sent to the master
// (MasterService.UploadDataset) and the master copied to the tasks
// (WorkerService.PutDataset), kept content-addressed under a root:
//
//   <root>/<id>/train_images, train_labels[, test_images, test_labels]
//
// where <id> is the dataset's id, 64 lowercase hex digits: the SHA-256 of,
// for each file present in the canonical order kUploadFileNames, its name,
// one NUL byte, its size as 8 bytes big-endian and the SHA-256 of its bytes.
// A DatasetSpec with upload_id reads its IDX files from there
// (dataset_files.h) instead of from the data root.
//
// Thread-safety: thread-safe; the root is read under a mutex.
#ifndef WEFT_RUNTIME_DATA_UPLOADED_DATASET_H_
#define WEFT_RUNTIME_DATA_UPLOADED_DATASET_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/confined_root.h"
#include "common/sha256.h"

namespace weft {
namespace data {

// The files an upload may hold, in the canonical order of its id.
inline constexpr int kNumUploadFiles = 4;
inline constexpr const char* kUploadFileNames[kNumUploadFiles] = {"train_images", "train_labels", "test_images",
                                                                  "test_labels"};

// The index of `name` in kUploadFileNames; -1 when it is none of them.
int UploadFileIndex(absl::string_view name);

// INVALID_ARGUMENT naming the id unless it is 64 lowercase hex digits (so it
// can never be a path: no '/', no '.').
absl::Status CheckUploadId(absl::string_view id);

// A file of an upload and its SHA-256.
struct UploadedFileDigest {
  std::string name;  // one of kUploadFileNames
  int64_t size = 0;
  Sha256::Digest sha256{};
};
// The id of a dataset made of `files` (any order; see the file comment).
std::string UploadIdOf(std::vector<UploadedFileDigest> files);

// Where this process keeps uploaded datasets (the master's --upload_root, a
// task's --dataset_cache). Process-wide; nullopt (the default) or an error
// fails every load of an upload_id, saying why.
void SetUploadRoot(std::optional<absl::StatusOr<ConfinedRoot>> root);

// `<root>/<id>/<name>`, reached without a symbolic link. INVALID_ARGUMENT
// for a bad id or name; FAILED_PRECONDITION when this process keeps no
// uploads; NOT_FOUND when the dataset or the file is not there.
absl::StatusOr<std::string> UploadedFilePath(const std::string& id, absl::string_view name);

}  // namespace data
}  // namespace weft

#endif  // WEFT_RUNTIME_DATA_UPLOADED_DATASET_H_
