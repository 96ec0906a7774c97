#include "runtime/data/dataset.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_join.h"
#include "common/checked_math.h"
#include "common/status_macros.h"

namespace weft {
namespace data {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, n) by rejection, so the result depends only on the
// generator's (standardised) output, unlike std::uniform_int_distribution.
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t n) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  const uint64_t limit = kMax - kMax % n;  // a multiple of n
  uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return x % n;
}

// Written as a plain loop over restrict pointers so the compiler turns it into
// widening loads, int->float conversions and multiplies, 8 lanes at a time.
void ConvertPixels(const uint8_t* __restrict src, float* __restrict dst, int64_t n,
                   float inv_scale) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]) * inv_scale;
}

// Batches in an epoch of `n` examples. REQUIRES: `o` passed
// BatchIterator::Create's checks.
int64_t BatchesPerEpoch(int64_t n, const BatchOptions& o) {
  if (o.window > 0) return n / o.window;  // whole windows only
  return o.drop_remainder ? n / o.batch_size : n / o.batch_size + (n % o.batch_size != 0);
}

// BatchOptions' rules for window and window_offset, over a dataset of `n`
// examples. REQUIRES: o.batch_size >= 1.
absl::Status CheckWindow(int64_t n, const BatchOptions& o) {
  if (o.window == 0 && o.window_offset == 0) return absl::OkStatus();
  const std::string values =
      absl::StrCat("window=", o.window, " window_offset=", o.window_offset, " batch_size=", o.batch_size);
  if (o.window < 0) return absl::InvalidArgumentError(absl::StrCat(values, ": window must be >= 0"));
  if (o.window == 0) return absl::InvalidArgumentError(absl::StrCat(values, ": a window_offset needs a window"));
  // Every reader of a window must get a whole batch, or the readers
  // together would not read the window exactly once.
  if (!o.drop_remainder) {
    return absl::InvalidArgumentError(
        absl::StrCat(values, ": windows need drop_remainder (training), not an evaluation pass"));
  }
  // Overflow-safe: both come from a graph's attributes.
  if (!RangeWithin(o.window_offset, o.batch_size, o.window)) {
    return absl::InvalidArgumentError(absl::StrCat(
        values, ": the batch [window_offset, window_offset + batch_size) does not lie within [0, window)"));
  }
  if (o.window > n) {
    return absl::InvalidArgumentError(
        absl::StrCat(values, ": the window is larger than the dataset's ", n, " examples"));
  }
  return absl::OkStatus();
}

}  // namespace

// ---- InMemoryDataset -------------------------------------------------------

absl::StatusOr<InMemoryDataset> InMemoryDataset::Create(std::vector<int64_t> example_shape,
                                                        std::vector<uint8_t> pixels,
                                                        std::vector<int32_t> labels, int64_t label_elems) {
  if (label_elems < 1 || labels.size() % static_cast<uint64_t>(label_elems) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(labels.size(), " labels do not make examples of ", label_elems, " labels each"));
  }
  const uint64_t examples = labels.size() / static_cast<uint64_t>(label_elems);
  int64_t elems = 1;
  for (int64_t d : example_shape) {
    if (d <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "example shape [", absl::StrJoin(example_shape, ","), "] has a non-positive dim"));
    }
    elems *= d;
  }
  if (pixels.size() != examples * static_cast<uint64_t>(elems)) {
    return absl::InvalidArgumentError(
        absl::StrCat(pixels.size(), " pixels do not make ", examples, " examples of shape [",
                     absl::StrJoin(example_shape, ","), "] (", elems, " pixels each)"));
  }
  InMemoryDataset ds;
  ds.example_shape_ = std::move(example_shape);
  ds.example_elems_ = elems;
  ds.label_elems_ = label_elems;
  ds.size_ = static_cast<int64_t>(examples);
  ds.pixels_ = std::make_shared<const std::vector<uint8_t>>(std::move(pixels));
  ds.labels_ = std::make_shared<const std::vector<int32_t>>(std::move(labels));
  return ds;
}

absl::StatusOr<InMemoryDataset> InMemoryDataset::Shard(int64_t index, int64_t count) const {
  if (count < 1 || index < 0 || index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard index ", index, " is not in [0, ", count, ")"));
  }
  InMemoryDataset out = *this;
  out.size_ = size() > index ? (size() - index + count - 1) / count : 0;
  out.first_ = first_ + index * stride_;
  out.stride_ = stride_ * count;
  return out;
}

InMemoryDataset InMemoryDataset::Take(int64_t n) const {
  InMemoryDataset out = *this;
  out.size_ = std::min(std::max<int64_t>(n, 0), size());
  return out;
}

// ---- BatchIterator ---------------------------------------------------------

class BatchIterator::Producer {
 public:
  Producer(const InMemoryDataset* ds, const BatchOptions& o)
      : ds_(ds),
        options_(o),
        allocator_(o.allocator != nullptr ? o.allocator : CpuAllocator()),
        inv_scale_(1.0f / o.scale),
        stride_(o.window > 0 ? o.window : o.batch_size),
        order_(static_cast<size_t>(ds->size())),
        epoch_(o.first_epoch) {
    // Skipping whole epochs is arithmetic; the rest starts the first epoch
    // that many batches (windows) in (training drops the remainder, so
    // batches align). Below size(): skip_batches % per_epoch batches of
    // stride_ fit in the epoch.
    const int64_t per_epoch = BatchesPerEpoch(ds->size(), o);
    if (per_epoch > 0 && o.skip_batches > 0) {
      epoch_ += o.skip_batches / per_epoch;
      start_pos_ = (o.skip_batches % per_epoch) * stride_;
    }
    first_epoch_ = epoch_;
    batch_shape_.AddDim(o.batch_size);
    for (int64_t d : ds->example_shape()) batch_shape_.AddDim(d);
  }

  bool finished() const { return finished_; }
  // Not OK once a batch could not be allocated; Produce then returned
  // nullopt and finished() is true.
  const absl::Status& status() const { return status_; }

  // The next batch, or nullopt at the end of an epoch.
  // REQUIRES: !finished().
  std::optional<Batch> Produce() {
    if (!epoch_started_) StartEpoch();
    // The batch is order_[first, first + take). pos_ is where the batch (or
    // its window) starts, and first never passes size(): the window lies
    // within the order and the batch within the window.
    int64_t take;
    int64_t first = pos_;
    if (options_.window > 0) {
      take = ds_->size() - pos_ >= options_.window ? options_.batch_size : 0;  // a partial window is dropped
      first += options_.window_offset;
    } else {
      take = std::min(options_.batch_size, ds_->size() - pos_);
      if (options_.drop_remainder && take < options_.batch_size) take = 0;
    }
    if (take == 0) {
      epoch_started_ = false;
      ++epoch_;
      finished_ = options_.num_epochs > 0 && epoch_ - first_epoch_ >= options_.num_epochs;
      return std::nullopt;
    }
    const int64_t elems = ds_->example_elems();
    batch_shape_.set_dim(0, take);
    Batch batch;
    // Through Allocate: a batch of a large dataset can exceed what the
    // allocator has, and that must fail the iterator, not the process.
    absl::StatusOr<Tensor> features_or = Tensor::Allocate(DType::kFloat32, batch_shape_, allocator_);
    const int64_t per = ds_->label_elems();
    const bool floats = ds_->float_examples();
    absl::StatusOr<Tensor> labels_or =
        Tensor::Allocate(floats ? DType::kFloat32 : DType::kInt32, TensorShape{take * per}, allocator_);
    if (!features_or.ok() || !labels_or.ok()) {
      status_ = Annotate(features_or.ok() ? labels_or.status() : features_or.status(),
                         absl::StrCat("batch of ", take, " examples"));
      finished_ = true;
      return std::nullopt;
    }
    batch.features = *std::move(features_or);
    batch.labels = *std::move(labels_or);
    batch.epoch = epoch_;
    float* features = batch.features.data<float>();
    if (floats) {
      float* targets = batch.labels.data<float>();
      for (int64_t b = 0; b < take; ++b) {
        const int64_t i = order_[first + b];
        std::copy_n(ds_->values(i), elems, features + b * elems);
        std::copy_n(ds_->targets(i), per, targets + b * per);
      }
    } else {
      int32_t* labels = batch.labels.data<int32_t>();
      for (int64_t b = 0; b < take; ++b) {
        const int64_t i = order_[first + b];
        ConvertPixels(ds_->pixels(i), features + b * elems, elems, inv_scale_);
        std::copy_n(ds_->labels(i), per, labels + b * per);
      }
    }
    pos_ += options_.window > 0 ? options_.window : take;
    return batch;
  }

 private:
  void StartEpoch() {
    std::iota(order_.begin(), order_.end(), int64_t{0});
    if (options_.shuffle) {
      std::mt19937_64 rng(SplitMix64(options_.seed ^ SplitMix64(static_cast<uint64_t>(epoch_))));
      for (size_t i = order_.size(); i > 1; --i) {
        std::swap(order_[i - 1], order_[UniformBelow(rng, i)]);
      }
    }
    pos_ = start_pos_;
    start_pos_ = 0;
    epoch_started_ = true;
  }

  absl::Status status_;
  const InMemoryDataset* const ds_;
  const BatchOptions options_;
  Allocator* const allocator_;
  const float inv_scale_;
  TensorShape batch_shape_;     // [batch, example_shape...]; dim 0 set per batch
  const int64_t stride_;        // positions from one batch's start to the next's: window or batch_size
  int64_t start_pos_ = 0;       // where the first epoch started begins (skip_batches)
  int64_t first_epoch_ = 0;     // the first epoch produced (after skip_batches)
  std::vector<int64_t> order_;  // example indices of the current epoch
  int64_t epoch_;
  int64_t pos_ = 0;  // where the next batch (its window, with windows) starts in order_
  bool epoch_started_ = false;
  bool finished_ = false;
};

absl::StatusOr<std::unique_ptr<BatchIterator>> BatchIterator::Create(const InMemoryDataset* dataset,
                                                                     const BatchOptions& options) {
  if (options.batch_size < 1 || !(options.scale > 0) || options.prefetch < 0 ||
      options.num_epochs < 0 || options.skip_batches < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad batch options: batch_size=", options.batch_size, " scale=", options.scale,
                     " prefetch=", options.prefetch, " num_epochs=", options.num_epochs,
                     " skip_batches=", options.skip_batches,
                     " (need batch_size >= 1, scale > 0, prefetch >= 0, num_epochs >= 0, skip_batches >= 0)"));
  }
  const int64_t n = dataset->size();
  RETURN_IF_ERROR(CheckWindow(n, options));
  const int64_t batches = BatchesPerEpoch(n, options);
  if (batches == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset of ", n, " examples gives no batch of ", options.batch_size,
                     options.drop_remainder ? " (partial batches are dropped)" : ""));
  }
  auto producer = std::make_unique<Producer>(dataset, options);
  return std::unique_ptr<BatchIterator>(new BatchIterator(std::move(producer), options.prefetch,
                                                          options.first_epoch + options.skip_batches / batches,
                                                          batches));
}

BatchIterator::BatchIterator(std::unique_ptr<Producer> producer, int prefetch, int64_t first_epoch,
                             int64_t batches_per_epoch)
    : producer_(std::move(producer)),
      prefetch_(static_cast<size_t>(prefetch)),
      batches_per_epoch_(batches_per_epoch),
      epoch_(first_epoch) {
  if (prefetch_ > 0) thread_ = std::thread([this] { PrefetchLoop(); });
}

BatchIterator::~BatchIterator() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

bool BatchIterator::HasRoomOrStopping() const { return stopping_ || queue_.size() < prefetch_; }

bool BatchIterator::HasItemOrDone() const { return !queue_.empty() || done_; }

void BatchIterator::PrefetchLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &BatchIterator::HasRoomOrStopping));
      if (stopping_) return;
    }
    // Built outside the lock so the consumer can take earlier batches meanwhile.
    std::optional<Batch> item = producer_->Produce();
    const bool finished = producer_->finished();
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(item));
    if (finished) {
      done_ = true;
      return;
    }
  }
}

absl::StatusOr<std::optional<Batch>> BatchIterator::Next() {
  std::optional<Batch> item;
  if (prefetch_ == 0) {
    if (producer_->finished()) return std::nullopt;
    item = producer_->Produce();
  } else {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &BatchIterator::HasItemOrDone));
    if (queue_.empty()) return std::nullopt;  // every epoch has ended
    item = std::move(queue_.front());
    queue_.pop_front();
  }
  // The producer's error is written before its nullopt is queued (under mu_)
  // or returned here, so reading it now sees it.
  if (!item.has_value() && !producer_->status().ok()) return producer_->status();
  if (!item.has_value()) ++epoch_;
  return item;
}

// ---- Options and loading ---------------------------------------------------

BatchOptions BatchOptionsFromSpec(const DatasetSpec& spec, int64_t batch_size, uint64_t seed,
                                  bool train) {
  BatchOptions o;
  o.batch_size = batch_size;
  o.seed = seed;
  o.shuffle = train && !spec.no_shuffle();
  o.drop_remainder = train;
  o.prefetch = spec.prefetch() > 0 ? spec.prefetch() : 2;
  // A text corpus's features are byte ids, a series's its values: never scaled.
  const bool unscaled = spec.format() == DatasetSpec::TEXT || spec.format() == DatasetSpec::SERIES;
  o.scale = spec.scale() > 0 ? spec.scale() : unscaled ? 1.0f : 255.0f;
  o.num_epochs = train ? 0 : 1;
  return o;
}

}  // namespace data
}  // namespace weft
