// LoadDataset (runtime/data/dataset.h): a job's split, read from IDX,
// TFRecord, text or series files into an InMemoryDataset, every label checked
// against the model's classes.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "runtime/data/dataset.h"
#include "runtime/data/dataset_files.h"
#include "runtime/data/idx_reader.h"
#include "runtime/data/series.h"
#include "runtime/data/text_corpus.h"
#include "runtime/data/tfrecord.h"

namespace weft {
namespace data {

namespace {

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

absl::Status CheckLabels(absl::Span<const int32_t> labels, int64_t num_classes,
                         const std::string& where) {
  if (num_classes <= 0) return absl::OkStatus();
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": label ", labels[i], " of example ", i,
                       " is out of range for num_classes=", num_classes));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<InMemoryDataset> LoadIdx(const DatasetSpec& spec, bool train,
                                        absl::Span<const int64_t> example_shape,
                                        int64_t num_classes, int64_t limit) {
  ASSIGN_OR_RETURN(IdxFiles files, IdxFilesOf(spec, train));
  const std::string& images = files.images;
  ASSIGN_OR_RETURN(IdxExamples ex, ReadIdxExamples(files.images, files.labels, num_classes));
  std::vector<int64_t> shape = ex.images.example_shape;
  if (!example_shape.empty()) {
    int64_t elems = 1;
    for (int64_t d : example_shape) elems *= d;
    if (elems != ex.images.example_elems()) {
      return absl::InvalidArgumentError(
          absl::StrCat("example shape ", ShapeString(example_shape), " does not match the ",
                       ShapeString(ex.images.example_shape), " images in ", images));
    }
    shape.assign(example_shape.begin(), example_shape.end());
  }
  const int64_t n = limit > 0 ? std::min(limit, ex.images.count) : ex.images.count;
  ex.images.data.resize(static_cast<size_t>(n * ex.images.example_elems()));
  std::vector<int32_t> label_values(ex.labels.data.begin(), ex.labels.data.begin() + n);
  return InMemoryDataset::Create(std::move(shape), std::move(ex.images.data),
                                 std::move(label_values));
}

absl::StatusOr<InMemoryDataset> LoadTFRecord(const DatasetSpec& spec, bool train,
                                             absl::Span<const int64_t> example_shape,
                                             int64_t num_classes, int64_t limit) {
  const auto& files = train ? spec.train_files() : spec.test_files();
  if (files.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TFRECORD dataset spec has no ", train ? "train_files" : "test_files"));
  }
  if (example_shape.empty()) {
    return absl::InvalidArgumentError(
        "TFRECORD datasets need the example shape (records do not store it)");
  }
  int64_t elems = 1;
  for (int64_t d : example_shape) {
    if (d <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("example shape ", ShapeString(example_shape), " has a non-positive dim"));
    }
    elems *= d;
  }
  std::vector<uint8_t> pixels;
  std::vector<int32_t> labels;
  for (const std::string& file : files) {
    if (limit > 0 && static_cast<int64_t>(labels.size()) >= limit) break;
    ASSIGN_OR_RETURN(std::string path, ResolveDataPath(spec.dir(), file, "", "files"));
    const size_t start = labels.size();
    RETURN_IF_ERROR(ReadImageExamples(path, elems, &pixels, &labels));
    RETURN_IF_ERROR(CheckLabels(absl::MakeConstSpan(labels).subspan(start), num_classes, path));
  }
  if (limit > 0 && static_cast<int64_t>(labels.size()) > limit) {
    labels.resize(static_cast<size_t>(limit));
    pixels.resize(static_cast<size_t>(limit * elems));
  }
  return InMemoryDataset::Create({example_shape.begin(), example_shape.end()}, std::move(pixels),
                                 std::move(labels));
}

}  // namespace

absl::StatusOr<InMemoryDataset> LoadDataset(const DatasetSpec& spec, bool train,
                                            absl::Span<const int64_t> example_shape,
                                            int64_t num_classes) {
  ASSIGN_OR_RETURN(const int64_t limit, SplitLimit(spec, train));
  RETURN_IF_ERROR(CheckUploadSpec(spec));
  switch (spec.format()) {
    case DatasetSpec::FORMAT_DEFAULT:
    case DatasetSpec::IDX:
      return LoadIdx(spec, train, example_shape, num_classes, limit);
    case DatasetSpec::TFRECORD:
      return LoadTFRecord(spec, train, example_shape, num_classes, limit);
    case DatasetSpec::TEXT:
      return LoadText(spec, train, example_shape, num_classes, limit, Env::Default());
    case DatasetSpec::SERIES:
      return LoadSeries(spec, train, example_shape, limit, Env::Default());
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown dataset format ", static_cast<int>(spec.format())));
  }
}

}  // namespace data
}  // namespace weft
