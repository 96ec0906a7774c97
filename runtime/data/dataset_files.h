// Where a DatasetSpec's files are, confined to the data root (SetDataRoot in
// dataset.h), shared by LoadDataset and CountExamples. Internal to
// runtime/data.
//
// Thread-safety: thread-safe; the data root is read under a mutex.
#ifndef WEFT_RUNTIME_DATA_DATASET_FILES_H_
#define WEFT_RUNTIME_DATA_DATASET_FILES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace weft {
namespace data {

// `name` resolved against `dir` (an empty name means `default_name` in
// `dir`) and confined to the data root; `field` names the spec's field in
// errors.
absl::StatusOr<std::string> ResolveDataPath(const std::string& dir, const std::string& name,
                                            const char* default_name, const char* field);

// The images and labels files of an IDX split.
struct IdxFiles {
  std::string images;
  std::string labels;
};
absl::StatusOr<IdxFiles> IdxFilesOf(const DatasetSpec& spec, bool train);

// OK for a spec without upload_id; else INVALID_ARGUMENT unless the id is
// well-formed and the format IDX or unset.
absl::Status CheckUploadSpec(const DatasetSpec& spec);

// train_limit or test_limit: 0 keeps every example; INVALID_ARGUMENT when
// negative.
absl::StatusOr<int64_t> SplitLimit(const DatasetSpec& spec, bool train);

}  // namespace data
}  // namespace weft

#endif  // WEFT_RUNTIME_DATA_DATASET_FILES_H_
