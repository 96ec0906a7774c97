// Examples held in memory, and the pipeline that turns them into training
// and evaluation batches.
//
// InMemoryDataset is one split (train or test): uint8 pixels plus int32
// labels (classification), or float windows of one series plus float
// targets (regression); LoadDataset fills one from a DatasetSpec. BatchIterator
// walks a dataset epoch by epoch, in a seeded shuffled order or in file
// order, and yields float32 feature tensors (pixels / scale, or the values)
// with int32 label (or float32 target) tensors. With `prefetch` > 0 a background thread prepares
// batches ahead into a bounded queue.
//
// Shuffle order is a pure function of (seed, epoch): the same pair always
// gives the same order on every platform (mt19937_64 + explicit Fisher-Yates),
// so a resumed or replicated job sees the same batches.
//
// Batch tensors come from the iterator's Allocator; a caching allocator hands
// the same blocks back once the consumer drops earlier batches, so a steady
// loop makes no system allocations.
//
// Thread-safety: InMemoryDataset is immutable after construction and safe to
// share. BatchIterator is not thread-safe: one consumer thread calls Next().
// Its own prefetch thread is internal and joined by the destructor.
#ifndef WEFT_RUNTIME_DATA_DATASET_H_
#define WEFT_RUNTIME_DATA_DATASET_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/allocator.h"
#include "common/confined_root.h"
#include "common/env.h"
#include "common/tensor.h"
#include "proto/job.pb.h"

namespace weft {
namespace data {

class InMemoryDataset {
 public:
  InMemoryDataset() = default;  // no examples

  // Each example has `label_elems` labels (1 for a class; a sequence
  // model's one per position). INVALID_ARGUMENT unless every dim of
  // `example_shape` is positive, label_elems >= 1 divides labels.size(), and
  // pixels.size() == labels.size() / label_elems * product(example_shape).
  static absl::StatusOr<InMemoryDataset> Create(std::vector<int64_t> example_shape,
                                                std::vector<uint8_t> pixels,
                                                std::vector<int32_t> labels, int64_t label_elems = 1);

  // Float examples that are windows of arrays (a SERIES dataset): example
  // j's features are the product(example_shape) values from
  // features[j * feature_step], and its `target_elems` targets the values
  // from targets[j + target_offset] (`targets` may be `features` itself).
  // INVALID_ARGUMENT unless the dims are positive, feature_step >= 1,
  // target_offset >= 0, target_elems >= 1, count >= 0, neither array is
  // null, and every example's features and targets lie inside their arrays.
  // (Defined in series.cc, beside its one user.)
  static absl::StatusOr<InMemoryDataset> CreateWindows(std::vector<int64_t> example_shape,
                                                       std::shared_ptr<const std::vector<float>> features,
                                                       std::shared_ptr<const std::vector<float>> targets,
                                                       int64_t count, int64_t feature_step, int64_t target_offset,
                                                       int64_t target_elems);

  int64_t size() const { return size_; }
  // Float features and targets (CreateWindows) rather than pixels and labels.
  bool float_examples() const { return values_ != nullptr; }
  const std::vector<int64_t>& example_shape() const { return example_shape_; }
  int64_t example_elems() const { return example_elems_; }
  int64_t label_elems() const { return label_elems_; }
  // REQUIRES: 0 <= i < size().
  const uint8_t* pixels(int64_t i) const { return pixels_->data() + (first_ + i * stride_) * example_elems_; }
  // Example i's label_elems() labels.
  const int32_t* labels(int64_t i) const { return labels_->data() + (first_ + i * stride_) * label_elems_; }
  int32_t label(int64_t i) const { return labels(i)[0]; }
  // REQUIRES: float_examples(), 0 <= i < size(). Example i's features and
  // its label_elems() targets.
  const float* values(int64_t i) const { return values_->data() + (first_ + i * stride_) * step_; }
  const float* targets(int64_t i) const { return targets_->data() + (first_ + i * stride_) + target_offset_; }

  // The examples i with i % count == index, in order (PyTorch's x[index::count]):
  // the shards for index = 0..count-1 partition the dataset. A shard shares
  // this dataset's memory (no example is copied) and keeps it alive.
  // INVALID_ARGUMENT unless 0 <= index < count.
  absl::StatusOr<InMemoryDataset> Shard(int64_t index, int64_t count) const;
  // The first min(n, size()) examples, sharing this dataset's memory. REQUIRES: n >= 0.
  InMemoryDataset Take(int64_t n) const;

 private:
  std::vector<int64_t> example_shape_;
  int64_t example_elems_ = 0;
  int64_t label_elems_ = 1;
  // Example i is example first_ + i * stride_ of the shared arrays, which
  // shards and prefixes of one loaded split have in common.
  std::shared_ptr<const std::vector<uint8_t>> pixels_;  // row-major, example_elems_ per example
  std::shared_ptr<const std::vector<int32_t>> labels_;
  // Float examples instead (CreateWindows): the arrays they are windows of.
  std::shared_ptr<const std::vector<float>> values_;
  std::shared_ptr<const std::vector<float>> targets_;
  int64_t step_ = 0;
  int64_t target_offset_ = 0;
  int64_t first_ = 0;
  int64_t stride_ = 1;
  int64_t size_ = 0;
};

// Builds the train (`train` true) or test split that `spec` describes.
//  IDX: files resolve against spec.dir when relative; with dir set, empty
//    names default to train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
//    t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz. A non-empty
//    `example_shape` with the same element count as the images replaces their
//    shape (e.g. [784] or [28, 28, 1] for 28x28 images).
//  TFRECORD: train_files / test_files, concatenated in order; records use the
//    layout in tfrecord.h and `example_shape` is required.
//  TEXT: train_files hold the corpus; each example is a sequence of bytes
//    with the next byte at every position as its labels (text_corpus.h).
// train_limit / test_limit keep only the first N examples. When
// `num_classes` > 0, every label must be below it.
// Confines every file LoadDataset reads to `root` (a daemon's --data_root):
// a path outside it is PERMISSION_DENIED naming the file and the root, and
// one reached through a symbolic link below the root is refused. Process-
// wide; nullopt (the default: `weft train`, tests) reads any path; an error
// (a root that could not be opened) fails every load with it.
void SetDataRoot(std::optional<absl::StatusOr<ConfinedRoot>> root);

absl::StatusOr<InMemoryDataset> LoadDataset(const DatasetSpec& spec, bool train,
                                            absl::Span<const int64_t> example_shape = {},
                                            int64_t num_classes = 0);

// The number of examples LoadDataset would give for the split (its limit
// applied), from the files' headers alone: an IDX split's count is its
// images header's first dimension (checked against the labels header); a
// TFRecord split's is its records, counted from their length fields without
// reading the payloads. Whoever reads the examples checks them; this
// checks every header and length it reads as LoadDataset does (checked
// arithmetic, a truncated file refused) and is confined to the data root
// the same way. Errors name the file and the field or offset.
absl::StatusOr<int64_t> CountExamples(const DatasetSpec& spec, bool train, Env* env = Env::Default());

struct Batch {
  Tensor features;    // float32 [n, example_shape...], pixel * (1 / scale)
  Tensor labels;      // int32 [n * label_elems]: example b's labels from b * label_elems
                      // (float32 targets for a dataset of float examples)
  int64_t epoch = 0;  // the epoch the batch belongs to

  // Examples in the batch.
  int64_t size() const { return features.shape().dim(0); }
  // Labels in the batch: what accuracy and loss are averaged over.
  int64_t predictions() const { return labels.NumElements(); }
};

struct BatchOptions {
  int64_t batch_size = 32;
  bool shuffle = true;
  uint64_t seed = 0;
  // Training drops a last partial batch; evaluation (false) returns it so
  // every example is seen exactly once per epoch.
  bool drop_remainder = true;
  // Batches prepared ahead on a background thread; 0 prepares each batch on
  // the caller of Next().
  int prefetch = 0;
  float scale = 255.0f;     // features = pixel * (1 / scale); must be > 0
  int64_t first_epoch = 0;  // number of the first epoch (to resume a job)
  int64_t num_epochs = 0;   // epochs to produce; 0 = no limit
  // Batches to pass over before the first one returned, counted from the
  // start of first_epoch and crossing into later epochs (to resume a job at
  // a step): the batches that follow are those an iterator that had
  // returned that many would give. Not counted in num_epochs. >= 0.
  int64_t skip_batches = 0;
  // Where batch tensors come from; null = CpuAllocator(). Must outlive the
  // iterator and every batch it returned.
  Allocator* allocator = nullptr;
  // Global windows, for replicas that read slices of one order (an elastic
  // job, whose replica count may change between steps). When > 0, each
  // epoch's order of the whole dataset (shuffled by (seed, epoch) as above)
  // is cut into consecutive windows of `window` examples, a last partial
  // one dropped, and batch k of the epoch is the batch_size examples at
  // positions [k * window + window_offset, k * window + window_offset +
  // batch_size) of that order: readers with offsets 0, b, 2b, ... and batch
  // size b together read window k at their k-th batch, however many of them
  // there are. batches_per_epoch = size / window, and skip_batches counts
  // windows. Requires drop_remainder, 0 <= window_offset, window_offset +
  // batch_size <= window, and window <= the dataset's size. 0: batch k is
  // the order's k-th run of batch_size examples (window_offset must be 0).
  int64_t window = 0;
  int64_t window_offset = 0;
};

// The options a job's DatasetSpec asks for: scale (default 255), shuffle
// unless no_shuffle and only when training, prefetch (default 2), and
// drop_remainder and unbounded epochs when training, one full epoch otherwise.
BatchOptions BatchOptionsFromSpec(const DatasetSpec& spec, int64_t batch_size, uint64_t seed,
                                  bool train);

class BatchIterator {
 public:
  // `dataset` must outlive the iterator. INVALID_ARGUMENT for batch_size < 1,
  // scale <= 0, prefetch < 0, num_epochs < 0, skip_batches < 0, window
  // options outside the rules above (the message names the values), or a
  // dataset too small to give one batch per epoch.
  static absl::StatusOr<std::unique_ptr<BatchIterator>> Create(const InMemoryDataset* dataset,
                                                               const BatchOptions& options);
  // Stops the prefetch thread (mid-epoch is fine) and joins it.
  ~BatchIterator();
  BatchIterator(const BatchIterator&) = delete;
  BatchIterator& operator=(const BatchIterator&) = delete;

  // The next batch of the current epoch, or nullopt at the end of the epoch;
  // the call after a nullopt starts the next epoch. Once num_epochs epochs
  // have ended, returns nullopt forever. An error is never an end of epoch.
  absl::StatusOr<std::optional<Batch>> Next();

  // The epoch Next() is drawing from (first_epoch before the first call).
  int64_t epoch() const { return epoch_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

 private:
  class Producer;  // makes batches in order; touched by one thread at a time
  BatchIterator(std::unique_ptr<Producer> producer, int prefetch, int64_t first_epoch,
                int64_t batches_per_epoch);
  void PrefetchLoop();
  bool HasRoomOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasItemOrDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Used by the consumer when prefetch_ == 0, else only by thread_.
  const std::unique_ptr<Producer> producer_;
  const size_t prefetch_;
  const int64_t batches_per_epoch_;
  int64_t epoch_;  // consumer side

  absl::Mutex mu_;
  // Batches, with nullopt marking an epoch's end.
  std::deque<std::optional<Batch>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;  // the last epoch's end is queued
  std::thread thread_;
};

}  // namespace data
}  // namespace weft

#endif  // WEFT_RUNTIME_DATA_DATASET_H_
