#include "runtime/data/series.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "runtime/data/dataset_files.h"

namespace weft {
namespace data {
namespace {

constexpr int64_t kMaxWindow = int64_t{1} << 20;
constexpr int64_t kMaxColumns = 1024;

struct Params {
  int64_t window = 0;
  int64_t horizon = 1;
  double test_fraction = 0.1;
  // The columns read: the inputs, then the target (where it is not an
  // input), and where the target is among them.
  std::vector<std::string> columns;
  int64_t inputs = 1;
  size_t target = 0;
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
  p.columns.assign(s.inputs().begin(), s.inputs().end());
  if (p.columns.empty()) p.columns.push_back(s.column());
  p.inputs = static_cast<int64_t>(p.columns.size());
  if (p.inputs > kMaxColumns) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset.series.inputs names ", p.inputs, " columns, more than ", kMaxColumns));
  }
  for (size_t i = 0; i < p.columns.size(); ++i) {
    if (std::find(p.columns.begin(), p.columns.begin() + i, p.columns[i]) != p.columns.begin() + i) {
      return absl::InvalidArgumentError(
          absl::StrCat("dataset.series.inputs names column '", p.columns[i], "' twice"));
    }
  }
  p.target = static_cast<size_t>(std::find(p.columns.begin(), p.columns.end(), s.column()) - p.columns.begin());
  if (p.target == p.columns.size()) p.columns.push_back(s.column());
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

// The columns `p` reads, from the spec's file.
absl::StatusOr<std::vector<std::vector<float>>> ReadSeries(const DatasetSpec& spec, const Params& p, Env* env) {
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
  return ParseCsvColumns(*csv, p.columns, path);
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

// Standardises `values` in place with the mean and (population) standard
// deviation of its `train` rows, computed in double.
absl::Status Standardise(const std::string& column, const Range& train, std::vector<float>* values) {
  double sum = 0, squares = 0;
  for (int64_t i = train.begin; i < train.end; ++i) sum += (*values)[i];
  const double n = static_cast<double>(train.end - train.begin);
  const double mean = n > 0 ? sum / n : 0;
  for (int64_t i = train.begin; i < train.end; ++i) squares += ((*values)[i] - mean) * ((*values)[i] - mean);
  const double sd = n > 0 ? std::sqrt(squares / n) : 0;
  if (!(sd > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("SERIES column '", column,
                                                   "': the train split's values do not vary, so they cannot be "
                                                   "standardised (set series.raw to keep them)"));
  }
  for (float& v : *values) v = static_cast<float>((v - mean) / sd);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::vector<float>>> ParseCsvColumns(absl::string_view csv,
                                                                absl::Span<const std::string> columns,
                                                                absl::string_view file) {
  std::vector<std::vector<float>> values(columns.size());
  std::vector<size_t> at(columns.size());
  int64_t line_number = 0;
  size_t fields = 0;
  bool header = true;
  for (absl::string_view line : absl::StrSplit(csv, '\n')) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    std::vector<absl::string_view> cells = absl::StrSplit(line, ',');
    if (header) {
      header = false;
      fields = cells.size();
      for (size_t c = 0; c < columns.size(); ++c) {
        auto it = std::find_if(cells.begin(), cells.end(),
                               [&](absl::string_view h) { return absl::StripAsciiWhitespace(h) == columns[c]; });
        if (it == cells.end()) {
          return absl::InvalidArgumentError(absl::StrCat(file, ": the header line has no column '", columns[c],
                                                         "' (it has ", absl::StrJoin(cells, ", "), ")"));
        }
        at[c] = static_cast<size_t>(it - cells.begin());
      }
      continue;
    }
    if (cells.size() != fields) {
      return absl::InvalidArgumentError(absl::StrCat(file, ":", line_number, ": ", cells.size(),
                                                     " fields where the header has ", fields));
    }
    for (size_t c = 0; c < columns.size(); ++c) {
      float v = 0;
      const absl::string_view cell = absl::StripAsciiWhitespace(cells[at[c]]);
      if (!absl::SimpleAtof(cell, &v) || !std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrCat(file, ":", line_number, ": column '", columns[c],
                                                       "' holds '", cell.substr(0, 32), "', not a finite number"));
      }
      values[c].push_back(v);
    }
  }
  if (header) return absl::InvalidArgumentError(absl::StrCat(file, ": no header line (the file is empty)"));
  return values;
}

absl::StatusOr<int64_t> CountSeriesExamples(const DatasetSpec& spec, bool train, Env* env) {
  ASSIGN_OR_RETURN(const Params p, ParamsOf(spec));
  ASSIGN_OR_RETURN(const std::vector<std::vector<float>> columns, ReadSeries(spec, p, env));
  return SplitOf(p, static_cast<int64_t>(columns[0].size()), train).Examples(p);
}

absl::StatusOr<InMemoryDataset> LoadSeries(const DatasetSpec& spec, bool train,
                                           absl::Span<const int64_t> example_shape, int64_t limit, Env* env) {
  ASSIGN_OR_RETURN(const Params p, ParamsOf(spec));
  const std::vector<int64_t> shape = {p.window, p.inputs};
  const bool flat = example_shape.size() == 1 && example_shape[0] == p.window && p.inputs == 1;
  if (!example_shape.empty() && !flat && std::vector<int64_t>(example_shape.begin(), example_shape.end()) != shape) {
    return absl::InvalidArgumentError(absl::StrCat("a SERIES dataset's examples are [window=", p.window, ", inputs=",
                                                   p.inputs, "] values; the model's input_shape is [",
                                                   absl::StrJoin(example_shape, ","), "]"));
  }
  ASSIGN_OR_RETURN(std::vector<std::vector<float>> columns, ReadSeries(spec, p, env));
  const int64_t rows = static_cast<int64_t>(columns[0].size());
  const Range train_range = SplitOf(p, rows, true);
  if (!spec.series().raw()) {
    for (size_t c = 0; c < columns.size(); ++c) RETURN_IF_ERROR(Standardise(p.columns[c], train_range, &columns[c]));
  }
  const Range range = train ? train_range : SplitOf(p, rows, false);
  int64_t n = range.Examples(p);
  if (limit > 0) n = std::min(n, limit);
  // The split's rows only, so the examples never reach past its end: the
  // inputs row by row, and the target column (the same array when it is
  // the one input).
  const size_t count = static_cast<size_t>(range.end - range.begin);
  auto inputs = std::make_shared<std::vector<float>>(count * static_cast<size_t>(p.inputs));
  for (size_t r = 0; r < count; ++r) {
    for (int64_t c = 0; c < p.inputs; ++c) (*inputs)[r * p.inputs + c] = columns[c][range.begin + r];
  }
  std::shared_ptr<const std::vector<float>> targets = inputs;
  if (p.inputs != 1 || p.target != 0) {
    const std::vector<float>& t = columns[p.target];
    targets = std::make_shared<const std::vector<float>>(t.begin() + range.begin, t.begin() + range.end);
  }
  return InMemoryDataset::CreateWindows(flat ? std::vector<int64_t>{p.window} : shape, std::move(inputs),
                                        std::move(targets), n, /*feature_step=*/p.inputs,
                                        /*target_offset=*/p.window, p.horizon);
}

absl::StatusOr<InMemoryDataset> InMemoryDataset::CreateWindows(
    std::vector<int64_t> example_shape, std::shared_ptr<const std::vector<float>> features,
    std::shared_ptr<const std::vector<float>> targets, int64_t count, int64_t feature_step, int64_t target_offset,
    int64_t target_elems) {
  int64_t elems = 1;
  for (int64_t d : example_shape) {
    if (d <= 0 || !CheckedMul(elems, d, &elems)) {
      return absl::InvalidArgumentError(
          absl::StrCat("example shape [", absl::StrJoin(example_shape, ","), "] has a non-positive or huge dim"));
    }
  }
  // The last example's features and targets must end inside their arrays.
  int64_t last = 0, features_end = 0, targets_end = 0;
  if (features == nullptr || targets == nullptr || feature_step < 1 || target_offset < 0 || target_elems < 1 ||
      count < 0 ||
      (count > 0 && (!CheckedMul(count - 1, feature_step, &last) || !CheckedAdd(last, elems, &features_end) ||
                     features_end > static_cast<int64_t>(features->size()) ||
                     !CheckedAdd(count - 1, target_offset, &last) || !CheckedAdd(last, target_elems, &targets_end) ||
                     targets_end > static_cast<int64_t>(targets->size())))) {
    return absl::InvalidArgumentError(absl::StrCat(
        count, " windows of ", elems, " values ", feature_step, " apart and of ", target_elems, " targets at offset ",
        target_offset, " do not fit in ", features == nullptr ? 0 : features->size(), " values and ",
        targets == nullptr ? 0 : targets->size(), " targets"));
  }
  InMemoryDataset ds;
  ds.example_shape_ = std::move(example_shape);
  ds.example_elems_ = elems;
  ds.label_elems_ = target_elems;
  ds.size_ = count;
  ds.step_ = feature_step;
  ds.target_offset_ = target_offset;
  ds.values_ = std::move(features);
  ds.targets_ = std::move(targets);
  return ds;
}

}  // namespace data
}  // namespace weft
