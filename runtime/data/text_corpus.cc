#include "runtime/data/text_corpus.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "runtime/data/dataset_files.h"

namespace weft {
namespace data {
namespace {

constexpr int64_t kMaxSequenceLength = int64_t{1} << 20;

// The corpus: its files (resolved and confined) and their sizes when looked at.
struct Corpus {
  std::vector<std::string> paths;
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
};

// A split's bytes in the concatenation: [begin, end).
struct Range {
  uint64_t begin = 0;
  uint64_t end = 0;
  int64_t Examples(int64_t length) const {
    const uint64_t bytes = end - begin;
    return bytes < 2 ? 0 : static_cast<int64_t>((bytes - 1) / static_cast<uint64_t>(length));
  }
};

absl::StatusOr<int64_t> SequenceLength(const DatasetSpec& spec) {
  const int64_t length = spec.text().sequence_length();
  if (length < 1 || length > kMaxSequenceLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset.text.sequence_length must be in [1, ", kMaxSequenceLength, "], got ", length));
  }
  return length;
}

absl::StatusOr<Corpus> OpenCorpus(const DatasetSpec& spec, Env* env) {
  if (spec.train_files().empty()) {
    return absl::InvalidArgumentError("TEXT dataset spec has no train_files (the corpus)");
  }
  if (!spec.test_files().empty()) {
    return absl::InvalidArgumentError(
        "TEXT dataset spec: the test split is the end of the corpus (text.test_fraction), not test_files");
  }
  if (spec.scale() != 0 && spec.scale() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("TEXT dataset spec: the features are byte ids, which scale ", spec.scale(), " would change"));
  }
  Corpus c;
  for (const std::string& file : spec.train_files()) {
    ASSIGN_OR_RETURN(std::string path, ResolveDataPath(spec.dir(), file, "", "train_files"));
    absl::StatusOr<uint64_t> size = env->GetFileSize(path);
    if (!size.ok()) return absl::Status(size.status().code(), absl::StrCat(path, ": ", size.status().message()));
    if (!CheckedAdd(c.total, *size, &c.total) || c.total > kMaxTextBytes) {
      return absl::InvalidArgumentError(absl::StrCat("TEXT corpus: ", path, " takes the corpus past ",
                                                     kMaxTextBytes, " bytes, the most weft loads"));
    }
    c.paths.push_back(std::move(path));
    c.sizes.push_back(*size);
  }
  return c;
}

absl::StatusOr<Range> SplitOf(const DatasetSpec& spec, const Corpus& c, bool train) {
  const float f = spec.text().test_fraction() == 0 ? 0.1f : spec.text().test_fraction();
  if (!(f > 0.0f && f < 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.text.test_fraction must be in (0, 1), got ", f));
  }
  const auto test = static_cast<uint64_t>(std::floor(static_cast<double>(c.total) * f));
  const uint64_t boundary = c.total - test;
  return train ? Range{0, boundary} : Range{boundary, c.total};
}

// Reads `n` bytes of the concatenation from offset `at` into `dst`.
absl::Status ReadBytes(const Corpus& c, uint64_t at, uint64_t n, uint8_t* dst, Env* env) {
  uint64_t file_begin = 0;
  for (size_t f = 0; f < c.paths.size() && n > 0; ++f) {
    const uint64_t file_end = file_begin + c.sizes[f];
    if (at < file_end) {
      const uint64_t offset = at - file_begin;
      const uint64_t take = std::min(n, c.sizes[f] - offset);
      absl::StatusOr<std::unique_ptr<RandomAccessFile>> file = env->NewRandomAccessFile(c.paths[f]);
      if (!file.ok()) {
        return absl::Status(file.status().code(), absl::StrCat(c.paths[f], ": cannot open: ", file.status().message()));
      }
      RETURN_IF_ERROR((*file)->Read(offset, static_cast<size_t>(take), reinterpret_cast<char*>(dst)));
      dst += take;
      at += take;
      n -= take;
    }
    file_begin = file_end;
  }
  if (n > 0) return absl::OutOfRangeError("TEXT corpus: the files are shorter than when they were sized");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> CountTextExamples(const DatasetSpec& spec, bool train, Env* env) {
  ASSIGN_OR_RETURN(const int64_t length, SequenceLength(spec));
  ASSIGN_OR_RETURN(const Corpus corpus, OpenCorpus(spec, env));
  ASSIGN_OR_RETURN(const Range range, SplitOf(spec, corpus, train));
  return range.Examples(length);
}

absl::StatusOr<InMemoryDataset> LoadText(const DatasetSpec& spec, bool train, absl::Span<const int64_t> example_shape,
                                         int64_t num_classes, int64_t limit, Env* env) {
  ASSIGN_OR_RETURN(const int64_t length, SequenceLength(spec));
  if (!example_shape.empty() && (example_shape.size() != 1 || example_shape[0] != length)) {
    return absl::InvalidArgumentError(absl::StrCat("a TEXT dataset's examples are [sequence_length=", length,
                                                   "] byte ids; the model's input_shape is [",
                                                   absl::StrJoin(example_shape, ","), "]"));
  }
  ASSIGN_OR_RETURN(const Corpus corpus, OpenCorpus(spec, env));
  ASSIGN_OR_RETURN(const Range range, SplitOf(spec, corpus, train));
  int64_t n = range.Examples(length);
  if (limit > 0) n = std::min(n, limit);
  // n * length + 1 <= the split's bytes <= kMaxTextBytes: no overflow.
  const uint64_t tokens = static_cast<uint64_t>(n) * static_cast<uint64_t>(length);
  std::vector<uint8_t> bytes(n > 0 ? tokens + 1 : 0);
  if (n > 0) RETURN_IF_ERROR(ReadBytes(corpus, range.begin, bytes.size(), bytes.data(), env));
  if (num_classes > 0) {
    for (size_t i = 0; i < bytes.size(); ++i) {
      if (bytes[i] >= num_classes) {
        return absl::InvalidArgumentError(absl::StrCat("TEXT corpus: byte ", int{bytes[i]}, " at offset ",
                                                       range.begin + i, " of the ", train ? "train" : "test",
                                                       " split is not below num_classes=", num_classes));
      }
    }
  }
  std::vector<int32_t> labels(bytes.size() > 0 ? tokens : 0);
  for (uint64_t i = 0; i < labels.size(); ++i) labels[i] = bytes[i + 1];
  bytes.resize(labels.size());
  return InMemoryDataset::Create({length}, std::move(bytes), std::move(labels), length);
}

}  // namespace data
}  // namespace weft
