// A numeric time series as a regression's examples (DatasetSpec format
// SERIES, SeriesSpec in proto/job.proto): one column of a CSV file, in file
// order. The first (1 - test_fraction) of its values are the train split and
// the rest the test split; in a split of M values, example i's features are
// the `window` values from value i and its targets the `horizon` values
// after them, so a split holds M - window - horizon + 1 examples (none when
// that is below 1). The examples are windows of one array (no value is
// copied per example). Unless `raw`, every value is standardised with the
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

// The values of column `column` of CSV text `csv` (a header line, then one
// line per row; a last line may lack its newline, blank lines are skipped).
// `file` names the file in errors.
absl::StatusOr<std::vector<float>> ParseCsvColumn(absl::string_view csv, absl::string_view column,
                                                  absl::string_view file);

// The examples of the split, from the file (train_limit or test_limit not
// applied). Errors name the field or file at fault.
absl::StatusOr<int64_t> CountSeriesExamples(const DatasetSpec& spec, bool train, Env* env);

// The split's examples: example_shape [window] or [window, 1] (or empty for
// [window, 1]); at most `limit` examples when limit > 0.
absl::StatusOr<InMemoryDataset> LoadSeries(const DatasetSpec& spec, bool train,
                                           absl::Span<const int64_t> example_shape, int64_t limit, Env* env);

}  // namespace data
}  // namespace weft

#endif  // WEFT_RUNTIME_DATA_SERIES_H_
