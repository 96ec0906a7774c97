// A numeric time series as a regression's examples (DatasetSpec format
// SERIES, SeriesSpec in proto/job.proto): columns of a CSV file, in file
// order. The first (1 - test_fraction) of its rows are the train split and
// the rest the test split; in a split of M rows, example i's features are
// the `window` rows of the input columns from row i and its targets the
// `horizon` values of the target column after them, so a split holds
// M - window - horizon + 1 examples (none when that is below 1). The
// examples are windows of two arrays, the inputs row by row and the target
// column (one array when the target is the one input), so no value is
// copied per example. Unless `raw`, each column is standardised with its
// train split's mean and standard deviation. Internal to runtime/data.
//
// The file resolves against spec.dir and is confined to the data root as
// every dataset file is (dataset_files.h). A file above kMaxSeriesBytes is
// refused before it is read. Quoted fields are not supported: a line whose
// field count differs from the header's, or a value that is not a finite
// number, is refused naming the file, line and column.
//
// Thread-safety: pure functions of the spec and the file.
#ifndef WEFT_RUNTIME_DATA_SERIES_H_
#define WEFT_RUNTIME_DATA_SERIES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/env.h"
#include "proto/job.pb.h"
#include "runtime/data/dataset.h"

namespace weft {
namespace data {

inline constexpr uint64_t kMaxSeriesBytes = uint64_t{256} << 20;

// The values of the named columns of CSV text `csv` (a header line, then
// one line per row; a last line may lack its newline, blank lines are
// skipped), one vector per name in order. `file` names the file in errors.
absl::StatusOr<std::vector<std::vector<float>>> ParseCsvColumns(absl::string_view csv,
                                                                absl::Span<const std::string> columns,
                                                                absl::string_view file);

// The examples of the split, from the file (train_limit or test_limit not
// applied). Errors name the field or file at fault.
absl::StatusOr<int64_t> CountSeriesExamples(const DatasetSpec& spec, bool train, Env* env);

// The split's examples: example_shape [window, inputs] (or empty for it;
// [window] too for one input); at most `limit` examples when limit > 0.
absl::StatusOr<InMemoryDataset> LoadSeries(const DatasetSpec& spec, bool train,
                                           absl::Span<const int64_t> example_shape, int64_t limit, Env* env);

}  // namespace data
}  // namespace weft

#endif  // WEFT_RUNTIME_DATA_SERIES_H_
