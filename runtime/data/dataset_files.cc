#include "runtime/data/dataset_files.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/checked_math.h"
#include "common/confined_root.h"
#include "common/status_macros.h"
#include "runtime/data/dataset.h"
#include "runtime/data/idx_reader.h"
#include "runtime/data/series.h"
#include "runtime/data/text_corpus.h"
#include "runtime/data/tfrecord.h"
#include "runtime/data/uploaded_dataset.h"

namespace weft {
namespace data {
namespace {

constexpr char kDefaultTrainImages[] = "train-images-idx3-ubyte.gz";
constexpr char kDefaultTrainLabels[] = "train-labels-idx1-ubyte.gz";
constexpr char kDefaultTestImages[] = "t10k-images-idx3-ubyte.gz";
constexpr char kDefaultTestLabels[] = "t10k-labels-idx1-ubyte.gz";

absl::Mutex g_root_mu;
// Unset: no confinement. An error: every dataset load fails with it.
std::optional<absl::StatusOr<ConfinedRoot>>* g_root ABSL_GUARDED_BY(g_root_mu) = nullptr;

// A dataset file's path, confined to the data root when one is set: under
// it, and reached without a symbolic link.
absl::StatusOr<std::string> Confine(const std::string& path, const char* field) {
  std::optional<ConfinedRoot> root;
  {
    absl::MutexLock lock(&g_root_mu);
    if (g_root == nullptr || !g_root->has_value()) return path;
    if (!(*g_root)->ok()) {
      return absl::PermissionDeniedError(absl::StrCat("dataset ", field, " ", path, ": this daemon reads no datasets (",
                                                      (*g_root)->status().message(), ")"));
    }
    root = ***g_root;
  }
  absl::StatusOr<std::string> rel = root->Relativize(path);
  if (!rel.ok()) {
    return absl::PermissionDeniedError(absl::StrCat("dataset ", field, " ", path, " is outside the data root ",
                                                    root->path(), " (--data_root)"));
  }
  return root->Resolve(*rel, /*create_dirs=*/false);
}

}  // namespace

absl::StatusOr<std::string> ResolveDataPath(const std::string& dir, const std::string& name,
                                            const char* default_name, const char* field) {
  if (name.empty()) {
    if (dir.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("dataset spec sets neither ", field, " nor dir"));
    }
    return Confine(absl::StrCat(dir, "/", default_name), field);
  }
  if (name[0] == '/' || dir.empty()) return Confine(name, field);
  return Confine(absl::StrCat(dir, "/", name), field);
}

absl::StatusOr<IdxFiles> IdxFilesOf(const DatasetSpec& spec, bool train) {
  IdxFiles f;
  if (!spec.upload_id().empty()) {
    // An upload's files, kept by this process (uploaded_dataset.h); the
    // spec's file names and dir do not apply.
    ASSIGN_OR_RETURN(f.images, UploadedFilePath(spec.upload_id(), train ? "train_images" : "test_images"));
    ASSIGN_OR_RETURN(f.labels, UploadedFilePath(spec.upload_id(), train ? "train_labels" : "test_labels"));
    return f;
  }
  ASSIGN_OR_RETURN(f.images, ResolveDataPath(spec.dir(), train ? spec.train_images() : spec.test_images(),
                                             train ? kDefaultTrainImages : kDefaultTestImages,
                                             train ? "train_images" : "test_images"));
  ASSIGN_OR_RETURN(f.labels, ResolveDataPath(spec.dir(), train ? spec.train_labels() : spec.test_labels(),
                                             train ? kDefaultTrainLabels : kDefaultTestLabels,
                                             train ? "train_labels" : "test_labels"));
  return f;
}

absl::Status CheckUploadSpec(const DatasetSpec& spec) {
  if (spec.upload_id().empty()) return absl::OkStatus();
  if (spec.format() != DatasetSpec::FORMAT_DEFAULT && spec.format() != DatasetSpec::IDX) {
    return absl::InvalidArgumentError(absl::StrCat("dataset upload_id ", spec.upload_id().substr(0, 64),
                                                   " holds IDX files: format must be IDX or unset, not ",
                                                   DatasetSpec::Format_Name(spec.format())));
  }
  return CheckUploadId(spec.upload_id());
}

absl::StatusOr<int64_t> SplitLimit(const DatasetSpec& spec, bool train) {
  const int64_t limit = train ? spec.train_limit() : spec.test_limit();
  if (limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(train ? "train_limit" : "test_limit", " must not be negative, got ", limit));
  }
  return limit;
}

void SetDataRoot(std::optional<absl::StatusOr<ConfinedRoot>> root) {
  absl::MutexLock lock(&g_root_mu);
  if (g_root == nullptr) g_root = new std::optional<absl::StatusOr<ConfinedRoot>>();
  *g_root = std::move(root);
}

namespace {

absl::StatusOr<int64_t> CountIdx(const DatasetSpec& spec, bool train, Env* env) {
  ASSIGN_OR_RETURN(IdxFiles files, IdxFilesOf(spec, train));
  ASSIGN_OR_RETURN(IdxHeader images, ReadIdxHeader(files.images, /*expected_rank=*/-1, env));
  if (images.example_shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(files.images, ": expected an images file (rank >= 2), found a rank-1 IDX file"));
  }
  ASSIGN_OR_RETURN(IdxHeader labels, ReadIdxHeader(files.labels, /*expected_rank=*/1, env));
  if (images.count != labels.count) {
    return absl::InvalidArgumentError(absl::StrCat(files.images, " holds ", images.count, " images but ",
                                                   files.labels, " holds ", labels.count, " labels"));
  }
  return images.count;
}

absl::StatusOr<int64_t> CountTFRecord(const DatasetSpec& spec, bool train, int64_t limit, Env* env) {
  const auto& files = train ? spec.train_files() : spec.test_files();
  if (files.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TFRECORD dataset spec has no ", train ? "train_files" : "test_files"));
  }
  int64_t total = 0;
  for (const std::string& file : files) {
    if (limit > 0 && total >= limit) break;  // LoadDataset reads no further either
    ASSIGN_OR_RETURN(std::string path, ResolveDataPath(spec.dir(), file, "", "files"));
    ASSIGN_OR_RETURN(int64_t n, CountRecords(path, env));
    if (!CheckedAdd(total, n, &total)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": the dataset's files hold more than 2^63 records"));
    }
  }
  return total;
}

}  // namespace

absl::StatusOr<int64_t> CountExamples(const DatasetSpec& spec, bool train, Env* env) {
  ASSIGN_OR_RETURN(const int64_t limit, SplitLimit(spec, train));
  RETURN_IF_ERROR(CheckUploadSpec(spec));
  int64_t count = 0;
  switch (spec.format()) {
    case DatasetSpec::FORMAT_DEFAULT:
    case DatasetSpec::IDX: {
      ASSIGN_OR_RETURN(count, CountIdx(spec, train, env));
      break;
    }
    case DatasetSpec::TFRECORD: {
      ASSIGN_OR_RETURN(count, CountTFRecord(spec, train, limit, env));
      break;
    }
    case DatasetSpec::TEXT: {
      ASSIGN_OR_RETURN(count, CountTextExamples(spec, train, env));
      break;
    }
    case DatasetSpec::SERIES: {
      ASSIGN_OR_RETURN(count, CountSeriesExamples(spec, train, env));
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown dataset format ", static_cast<int>(spec.format())));
  }
  return limit > 0 ? std::min(limit, count) : count;
}

}  // namespace data
}  // namespace weft
