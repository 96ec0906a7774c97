// A text corpus as a language model's examples (DatasetSpec format TEXT,
// TextSpec in proto/job.proto): the concatenation of the spec's train_files,
// byte by byte. The first (1 - test_fraction) of its bytes are the train
// split and the rest the test split; in each, example i is the
// sequence_length bytes from offset i * sequence_length, and its labels are
// the bytes one further on, so a split of B bytes holds
// floor((B - 1) / sequence_length) examples. Internal to runtime/data.
//
// Files resolve against spec.dir and are confined to the data root as every
// dataset file is (dataset_files.h). A corpus above kMaxTextBytes is refused
// before anything is read, so a file cannot make a daemon allocate without
// bound.
//
// Thread-safety: pure functions of the spec and the files.
#ifndef WEFT_RUNTIME_DATA_TEXT_CORPUS_H_
#define WEFT_RUNTIME_DATA_TEXT_CORPUS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/env.h"
#include "proto/job.pb.h"
#include "runtime/data/dataset.h"

namespace weft {
namespace data {

inline constexpr uint64_t kMaxTextBytes = uint64_t{1} << 30;

// The examples of the split, from the files' sizes alone (train_limit or
// test_limit not applied). Errors name the field or file at fault.
absl::StatusOr<int64_t> CountTextExamples(const DatasetSpec& spec, bool train, Env* env);

// The split's examples: example_shape [sequence_length] (or empty), and
// labels below num_classes when num_classes > 0; at most `limit` examples
// when limit > 0.
absl::StatusOr<InMemoryDataset> LoadText(const DatasetSpec& spec, bool train, absl::Span<const int64_t> example_shape,
                                         int64_t num_classes, int64_t limit, Env* env);

}  // namespace data
}  // namespace weft

#endif  // WEFT_RUNTIME_DATA_TEXT_CORPUS_H_
