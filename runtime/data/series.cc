#include "runtime/data/series.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "runtime/data/dataset_files.h"

namespace weft {
namespace data {
namespace {

constexpr int64_t kMaxWindow = int64_t{1} << 20;

struct Params {
  int64_t window = 0;
  int64_t horizon = 1;
  double test_fraction = 0.1;
};

absl::StatusOr<Params> ParamsOf(const DatasetSpec& spec) {
  const SeriesSpec& s = spec.series();
  Params p;
  p.window = s.window();
  p.horizon = s.horizon() == 0 ? 1 : s.horizon();
  p.test_fraction = s.test_fraction() == 0 ? 0.1 : s.test_fraction();
  if (p.window < 1 || p.window > kMaxWindow) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset.series.window must be in [1, ", kMaxWindow, "], got ", s.window()));
  }
  if (p.horizon < 1 || p.horizon > kMaxWindow) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset.series.horizon must be in [1, ", kMaxWindow, "], got ", s.horizon()));
  }
  if (!(p.test_fraction > 0 && p.test_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset.series.test_fraction must be in (0, 1), got ", s.test_fraction()));
  }
  if (s.column().empty()) return absl::InvalidArgumentError("dataset.series.column is empty: name the CSV column");
  if (spec.train_files_size() != 1 || !spec.test_files().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a SERIES dataset reads one CSV file from train_files (the test split is its end, series.test_fraction); "
        "got ",
        spec.train_files_size(), " train_files and ", spec.test_files_size(), " test_files"));
  }
  if (spec.scale() != 0 && spec.scale() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SERIES dataset spec: scale ", spec.scale(), " does not apply (values are standardised unless "
                     "series.raw)"));
  }
  return p;
}

// The whole series, read from the spec's file.
absl::StatusOr<std::vector<float>> ReadSeries(const DatasetSpec& spec, Env* env) {
  ASSIGN_OR_RETURN(std::string path, ResolveDataPath(spec.dir(), spec.train_files(0), "", "train_files"));
  absl::StatusOr<uint64_t> size = env->GetFileSize(path);
  if (!size.ok()) return absl::Status(size.status().code(), absl::StrCat(path, ": ", size.status().message()));
  if (*size > kMaxSeriesBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("SERIES file ", path, " holds ", *size, " bytes, more than the ", kMaxSeriesBytes,
                     " weft loads"));
  }
  absl::StatusOr<std::string> csv = ReadFileToString(env, path);
  if (!csv.ok()) return absl::Status(csv.status().code(), absl::StrCat(path, ": ", csv.status().message()));
  return ParseCsvColumn(*csv, spec.series().column(), path);
}

// The split's values: [begin, end) of the series.
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t Examples(const Params& p) const { return std::max<int64_t>(end - begin - p.window - p.horizon + 1, 0); }
};

Range SplitOf(const Params& p, int64_t values, bool train) {
  const auto test = static_cast<int64_t>(std::floor(static_cast<double>(values) * p.test_fraction));
  return train ? Range{0, values - test} : Range{values - test, values};
}

}  // namespace

absl::StatusOr<std::vector<float>> ParseCsvColumn(absl::string_view csv, absl::string_view column,
                                                  absl::string_view file) {
  std::vector<float> values;
  int64_t line_number = 0;
  size_t fields = 0, at = 0;
  bool header = true;
  for (absl::string_view line : absl::StrSplit(csv, '\n')) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    std::vector<absl::string_view> cells = absl::StrSplit(line, ',');
    if (header) {
      header = false;
      fields = cells.size();
      auto it = std::find_if(cells.begin(), cells.end(),
                             [&](absl::string_view c) { return absl::StripAsciiWhitespace(c) == column; });
      if (it == cells.end()) {
        return absl::InvalidArgumentError(absl::StrCat(file, ": the header line has no column '", column,
                                                       "' (it has ", absl::StrJoin(cells, ", "), ")"));
      }
      at = static_cast<size_t>(it - cells.begin());
      continue;
    }
    if (cells.size() != fields) {
      return absl::InvalidArgumentError(absl::StrCat(file, ":", line_number, ": ", cells.size(),
                                                     " fields where the header has ", fields));
    }
    float v = 0;
    const absl::string_view cell = absl::StripAsciiWhitespace(cells[at]);
    if (!absl::SimpleAtof(cell, &v) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(absl::StrCat(file, ":", line_number, ": column '", column, "' holds '",
                                                     cell.substr(0, 32), "', not a finite number"));
    }
    values.push_back(v);
  }
  if (header) return absl::InvalidArgumentError(absl::StrCat(file, ": no header line (the file is empty)"));
  return values;
}

absl::StatusOr<int64_t> CountSeriesExamples(const DatasetSpec& spec, bool train, Env* env) {
  ASSIGN_OR_RETURN(const Params p, ParamsOf(spec));
  ASSIGN_OR_RETURN(const std::vector<float> values, ReadSeries(spec, env));
  return SplitOf(p, static_cast<int64_t>(values.size()), train).Examples(p);
}

absl::StatusOr<InMemoryDataset> LoadSeries(const DatasetSpec& spec, bool train,
                                           absl::Span<const int64_t> example_shape, int64_t limit, Env* env) {
  ASSIGN_OR_RETURN(const Params p, ParamsOf(spec));
  const bool column = example_shape.size() == 2 && example_shape[0] == p.window && example_shape[1] == 1;
  if (!example_shape.empty() && !column && !(example_shape.size() == 1 && example_shape[0] == p.window)) {
    return absl::InvalidArgumentError(absl::StrCat("a SERIES dataset's examples are [window=", p.window, "] or [",
                                                   p.window, ", 1] values; the model's input_shape is [",
                                                   absl::StrJoin(example_shape, ","), "]"));
  }
  ASSIGN_OR_RETURN(std::vector<float> values, ReadSeries(spec, env));
  const Range train_range = SplitOf(p, static_cast<int64_t>(values.size()), true);
  if (!spec.series().raw()) {
    // The train split's mean and standard deviation, in double.
    double sum = 0, squares = 0;
    for (int64_t i = train_range.begin; i < train_range.end; ++i) sum += values[i];
    const double n = static_cast<double>(train_range.end - train_range.begin);
    const double mean = n > 0 ? sum / n : 0;
    for (int64_t i = train_range.begin; i < train_range.end; ++i) squares += (values[i] - mean) * (values[i] - mean);
    const double sd = n > 0 ? std::sqrt(squares / n) : 0;
    if (!(sd > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("SERIES column '", spec.series().column(),
                                                     "': the train split's values do not vary, so they cannot be "
                                                     "standardised (set series.raw to keep them)"));
    }
    for (float& v : values) v = static_cast<float>((v - mean) / sd);
  }
  const Range range = train ? train_range : SplitOf(p, static_cast<int64_t>(values.size()), false);
  int64_t n = range.Examples(p);
  if (limit > 0) n = std::min(n, limit);
  // The split's values only: the examples never reach past its end.
  std::vector<float> split(values.begin() + range.begin, values.begin() + range.end);
  std::vector<int64_t> shape = column || example_shape.empty() ? std::vector<int64_t>{p.window, 1}
                                                               : std::vector<int64_t>{p.window};
  return InMemoryDataset::CreateWindows(std::move(shape), std::move(split), n, /*step=*/1,
                                        /*target_offset=*/p.window, p.horizon);
}

}  // namespace data
}  // namespace weft
