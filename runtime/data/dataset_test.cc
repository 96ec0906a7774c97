#include "runtime/data/dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <limits>
#include <cerrno>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/data/test_files.h"
#include "runtime/data/tfrecord.h"

namespace weft {
namespace data {
namespace {

using ::weft::data::testing::Gzip;
using ::weft::data::testing::IdxBytes;
using ::weft::data::testing::TempPath;
using ::weft::data::testing::WriteFile;

// `n` examples of shape [2, 3]; example i has label i and pixels 10*i + k
// (mod 256), so every batch can be checked against its labels.
InMemoryDataset MakeDataset(int64_t n) {
  std::vector<uint8_t> pixels(static_cast<size_t>(n) * 6);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    labels[i] = static_cast<int32_t>(i);
    for (int k = 0; k < 6; ++k) pixels[i * 6 + k] = static_cast<uint8_t>(10 * i + k);
  }
  auto ds = InMemoryDataset::Create({2, 3}, std::move(pixels), std::move(labels));
  EXPECT_TRUE(ds.ok()) << ds.status();
  return *std::move(ds);
}

std::unique_ptr<BatchIterator> MakeIterator(const InMemoryDataset* ds, const BatchOptions& o) {
  auto it = BatchIterator::Create(ds, o);
  EXPECT_TRUE(it.ok()) << it.status();
  return it.ok() ? *std::move(it) : nullptr;
}

// The labels of each batch of the iterator's next epoch.
std::vector<std::vector<int32_t>> EpochLabels(BatchIterator* it) {
  std::vector<std::vector<int32_t>> out;
  while (true) {
    auto b = it->Next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok() || !b->has_value()) return out;
    auto labels = (*b)->labels.flat<int32_t>();
    out.emplace_back(labels.begin(), labels.end());
  }
}

std::vector<int32_t> Flatten(const std::vector<std::vector<int32_t>>& batches) {
  std::vector<int32_t> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

std::vector<int32_t> Range(int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST(InMemoryDatasetTest, CreateChecksSizes) {
  EXPECT_FALSE(InMemoryDataset::Create({2, 3}, std::vector<uint8_t>(11), {0, 1}).ok());
  EXPECT_FALSE(InMemoryDataset::Create({2, 0}, {}, {0}).ok());
  auto ds = InMemoryDataset::Create({2, 3}, std::vector<uint8_t>(12), {4, 5});
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->size(), 2);
  EXPECT_EQ(ds->example_elems(), 6);
  EXPECT_EQ(ds->label(1), 5);
}

TEST(InMemoryDatasetTest, ShardsPartitionTheDataset) {
  const InMemoryDataset ds = MakeDataset(10);
  for (int64_t count : {1, 3, 4, 10, 12}) {
    std::vector<int> seen(10, 0);
    for (int64_t index = 0; index < count; ++index) {
      auto shard = ds.Shard(index, count);
      ASSERT_TRUE(shard.ok()) << shard.status();
      for (int64_t k = 0; k < shard->size(); ++k) {
        const int32_t i = shard->label(k);
        EXPECT_EQ(i % count, index);  // strided, like x[index::count]
        EXPECT_EQ(shard->pixels(k)[5], static_cast<uint8_t>(10 * i + 5));
        ++seen[i];
      }
    }
    EXPECT_EQ(seen, std::vector<int>(10, 1)) << "count " << count;
  }
  auto s1 = ds.Shard(1, 3);
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(s1->size(), 3);
  EXPECT_EQ(s1->label(2), 7);
  EXPECT_FALSE(ds.Shard(3, 3).ok());
  EXPECT_FALSE(ds.Shard(-1, 3).ok());
}

TEST(InMemoryDatasetTest, ShardsShareMemoryAndNest) {
  std::optional<InMemoryDataset> ds = MakeDataset(10);
  auto shard = ds->Shard(1, 2);  // examples 1, 3, 5, 7, 9
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(shard->pixels(2), ds->pixels(5));  // no copy
  auto nested = shard->Shard(1, 2);            // examples 3, 7
  ASSERT_TRUE(nested.ok()) << nested.status();
  ASSERT_EQ(nested->size(), 2);
  EXPECT_EQ(nested->label(0), 3);
  EXPECT_EQ(nested->label(1), 7);
  const InMemoryDataset first = shard->Take(2);  // examples 1, 3
  ASSERT_EQ(first.size(), 2);
  EXPECT_EQ(first.label(1), 3);
  ds.reset();  // a shard keeps the examples alive
  EXPECT_EQ(nested->pixels(1)[5], static_cast<uint8_t>(75));
  EXPECT_EQ(first.pixels(0)[0], static_cast<uint8_t>(10));
}

TEST(InMemoryDatasetTest, Take) {
  const InMemoryDataset ds = MakeDataset(10);
  EXPECT_EQ(ds.Take(4).size(), 4);
  EXPECT_EQ(ds.Take(4).label(3), 3);
  EXPECT_EQ(ds.Take(100).size(), 10);
  EXPECT_EQ(ds.Take(0).size(), 0);
}

TEST(BatchIteratorTest, EvaluationCoversEpochExactlyOnceWithPartialBatch) {
  const InMemoryDataset ds = MakeDataset(10);
  BatchOptions o;
  o.batch_size = 3;
  o.drop_remainder = false;
  o.shuffle = true;
  o.num_epochs = 1;
  auto it = MakeIterator(&ds, o);
  EXPECT_EQ(it->batches_per_epoch(), 4);
  auto batches = EpochLabels(it.get());
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches.back().size(), 1u);
  std::vector<int32_t> all = Flatten(batches);
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, Range(10));
  // num_epochs = 1: the iterator stays exhausted.
  EXPECT_EQ(it->epoch(), 1);
  EXPECT_FALSE(it->Next().value().has_value());
  EXPECT_FALSE(it->Next().value().has_value());
}

// A batch_size from a hostile graph: n + batch_size - 1 would overflow.
TEST(BatchIteratorTest, BatchSizeNearInt64MaxGivesOneBatchOfEverything) {
  const InMemoryDataset ds = MakeDataset(10);
  BatchOptions o;
  o.batch_size = std::numeric_limits<int64_t>::max();
  o.drop_remainder = false;
  o.num_epochs = 1;
  auto it = MakeIterator(&ds, o);
  EXPECT_EQ(it->batches_per_epoch(), 1);
  auto batches = EpochLabels(it.get());
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].size(), 10u);
}

TEST(BatchIteratorTest, TrainingDropsRemainderAndConvertsPixels) {
  const InMemoryDataset ds = MakeDataset(10);
  BatchOptions o;
  o.batch_size = 4;
  o.shuffle = false;
  o.scale = 255.0f;
  auto it = MakeIterator(&ds, o);
  EXPECT_EQ(it->batches_per_epoch(), 2);
  auto b = it->Next();
  ASSERT_TRUE(b.ok() && b->has_value());
  const Batch& batch = **b;
  EXPECT_EQ(batch.features.dtype(), DType::kFloat32);
  EXPECT_EQ(batch.features.shape(), (TensorShape{4, 2, 3}));
  EXPECT_EQ(batch.labels.dtype(), DType::kInt32);
  EXPECT_EQ(batch.labels.shape(), (TensorShape{4}));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(batch.labels.data<int32_t>()[i], i);
    for (int k = 0; k < 6; ++k) {
      EXPECT_FLOAT_EQ(batch.features.data<float>()[i * 6 + k], (10 * i + k) / 255.0f);
    }
  }
  EXPECT_EQ(Flatten(EpochLabels(it.get())), (std::vector<int32_t>{4, 5, 6, 7}));
  // The next epoch starts after the end-of-epoch nullopt.
  EXPECT_EQ(it->epoch(), 1);
  EXPECT_EQ(Flatten(EpochLabels(it.get())), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(BatchIteratorTest, ShuffleDependsOnlyOnSeedAndEpoch) {
  const InMemoryDataset ds = MakeDataset(50);
  BatchOptions o;
  o.batch_size = 50;
  o.seed = 42;
  auto a = MakeIterator(&ds, o);
  auto b = MakeIterator(&ds, o);
  const auto a0 = Flatten(EpochLabels(a.get())), a1 = Flatten(EpochLabels(a.get()));
  const auto b0 = Flatten(EpochLabels(b.get())), b1 = Flatten(EpochLabels(b.get()));
  EXPECT_EQ(a0, b0);
  EXPECT_EQ(a1, b1);
  EXPECT_NE(a0, a1);
  std::vector<int32_t> sorted = a1;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, Range(50));

  BatchOptions resumed = o;  // starting at epoch 1 reproduces epoch 1
  resumed.first_epoch = 1;
  EXPECT_EQ(Flatten(EpochLabels(MakeIterator(&ds, resumed).get())), a1);

  BatchOptions other = o;
  other.seed = 43;
  EXPECT_NE(Flatten(EpochLabels(MakeIterator(&ds, other).get())), a0);
}

TEST(BatchIteratorTest, SkipBatchesResumesWhereAnIteratorThatTookThemWouldBe) {
  // 23 examples in batches of 4: 5 batches per epoch (3 dropped). Skipping k
  // batches must give what the (k+1)-th Next() of a fresh iterator gives,
  // across epoch ends, with the same epoch numbers.
  const InMemoryDataset ds = MakeDataset(23);
  BatchOptions o;
  o.batch_size = 4;
  o.seed = 11;
  o.first_epoch = 2;
  std::vector<std::pair<int64_t, std::vector<int32_t>>> all;  // epoch, labels
  auto full = MakeIterator(&ds, o);
  while (all.size() < 13) {
    auto b = full->Next();
    ASSERT_TRUE(b.ok());
    if (!b->has_value()) continue;
    const int32_t* l = (*b)->labels.data<int32_t>();
    all.emplace_back((*b)->epoch, std::vector<int32_t>(l, l + 4));
  }
  for (int64_t skip : {0, 1, 4, 5, 7, 10, 12}) {
    BatchOptions resumed = o;
    resumed.skip_batches = skip;
    resumed.prefetch = skip % 2 == 0 ? 0 : 2;
    auto it = MakeIterator(&ds, resumed);
    EXPECT_EQ(it->epoch(), 2 + skip / 5) << "skip " << skip;
    for (size_t i = static_cast<size_t>(skip); i < all.size(); ++i) {
      auto b = it->Next();
      ASSERT_TRUE(b.ok());
      if (!b->has_value()) b = it->Next();  // an epoch's end
      ASSERT_TRUE(b.ok() && b->has_value());
      const int32_t* l = (*b)->labels.data<int32_t>();
      EXPECT_EQ((*b)->epoch, all[i].first) << "skip " << skip << " batch " << i;
      EXPECT_EQ(std::vector<int32_t>(l, l + 4), all[i].second) << "skip " << skip << " batch " << i;
    }
  }
  BatchOptions bad = o;
  bad.skip_batches = -1;
  EXPECT_FALSE(BatchIterator::Create(&ds, bad).ok());
}

TEST(BatchIteratorTest, ShuffleOrderIsPinned) {
  // The order is part of the contract (resumed and replicated jobs rely on
  // it): changing the generator or the shuffle must fail this test.
  const InMemoryDataset ds = MakeDataset(10);
  BatchOptions o;
  o.batch_size = 10;
  o.seed = 7;
  EXPECT_EQ(Flatten(EpochLabels(MakeIterator(&ds, o).get())),
            (std::vector<int32_t>{7, 8, 0, 4, 1, 6, 9, 5, 2, 3}));
}

TEST(BatchIteratorTest, PrefetchGivesTheSameBatchesAsSynchronous) {
  const InMemoryDataset ds = MakeDataset(37);
  BatchOptions o;
  o.batch_size = 5;
  o.seed = 3;
  o.drop_remainder = false;
  o.num_epochs = 3;
  for (int prefetch : {1, 4}) {
    BatchOptions sync_options = o;
    sync_options.prefetch = 0;
    o.prefetch = prefetch;
    auto sync = MakeIterator(&ds, sync_options);
    auto async = MakeIterator(&ds, o);
    for (int step = 0; step < 3 * (8 + 1) + 2; ++step) {
      auto x = sync->Next();
      auto y = async->Next();
      ASSERT_TRUE(x.ok() && y.ok());
      ASSERT_EQ(x->has_value(), y->has_value()) << "step " << step;
      if (!x->has_value()) continue;
      const Batch& bx = **x;
      const Batch& by = **y;
      EXPECT_EQ(bx.epoch, by.epoch);
      ASSERT_EQ(bx.features.shape(), by.features.shape());
      EXPECT_TRUE(std::equal(bx.labels.flat<int32_t>().begin(), bx.labels.flat<int32_t>().end(),
                             by.labels.flat<int32_t>().begin()));
      EXPECT_TRUE(std::equal(bx.features.flat<float>().begin(), bx.features.flat<float>().end(),
                             by.features.flat<float>().begin()));
    }
    EXPECT_EQ(sync->epoch(), 3);
    EXPECT_EQ(async->epoch(), 3);
  }
}

TEST(BatchIteratorTest, DestroyingMidEpochWithPrefetchReturns) {
  const InMemoryDataset ds = MakeDataset(1000);
  BatchOptions o;
  o.batch_size = 2;
  o.prefetch = 3;
  for (int taken : {0, 1, 7}) {
    auto it = MakeIterator(&ds, o);
    for (int i = 0; i < taken; ++i) {
      auto b = it->Next();
      ASSERT_TRUE(b.ok() && b->has_value());
      EXPECT_EQ((*b)->size(), 2);
    }
    it.reset();  // joins a producer that is blocked on the full queue
    EXPECT_EQ(it, nullptr);
  }
}

TEST(BatchIteratorTest, RejectsBadOptions) {
  const InMemoryDataset ds = MakeDataset(10);
  BatchOptions o;
  o.batch_size = 11;  // drop_remainder: no batch at all
  EXPECT_EQ(BatchIterator::Create(&ds, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.drop_remainder = false;
  EXPECT_TRUE(BatchIterator::Create(&ds, o).ok());
  o.batch_size = 0;
  EXPECT_FALSE(BatchIterator::Create(&ds, o).ok());
  o.batch_size = 2;
  o.scale = 0;
  EXPECT_FALSE(BatchIterator::Create(&ds, o).ok());
}

// ---- Global windows ----------------------------------------------------------

struct Taken {
  int64_t epoch = -1;
  std::vector<int32_t> labels;
};

// The iterator's next `count` batches, passing over epoch ends; checks that
// each example's features are its own pixels (MakeDataset's 10*i + k).
std::vector<Taken> TakeBatches(BatchIterator* it, int count) {
  std::vector<Taken> out;
  while (static_cast<int>(out.size()) < count) {
    auto b = it->Next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return out;
    if (!b->has_value()) continue;  // an epoch's end
    Taken t;
    t.epoch = (*b)->epoch;
    auto labels = (*b)->labels.flat<int32_t>();
    t.labels.assign(labels.begin(), labels.end());
    const float* f = (*b)->features.data<float>();
    for (size_t r = 0; r < t.labels.size(); ++r) {
      for (int k = 0; k < 6; ++k) {
        EXPECT_FLOAT_EQ(f[r * 6 + k], static_cast<uint8_t>(10 * t.labels[r] + k) / 255.0f) << "example " << t.labels[r];
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

// Readers r = 0..N-1 with window 12, batch 12/N and offset r * 12/N read, at
// their batch k, the slices of what one reader of 12-example batches (no
// window: today's iterator) reads at its batch k, for N = 1, 2 and 3. 40
// examples: 3 windows an epoch, the last 4 examples of each order dropped.
TEST(BatchIteratorTest, WindowReadersTogetherReadOneReadersBatches) {
  const InMemoryDataset ds = MakeDataset(40);
  BatchOptions whole;
  whole.batch_size = 12;
  whole.seed = 5;
  whole.first_epoch = 1;
  auto reference_it = MakeIterator(&ds, whole);
  const std::vector<Taken> reference = TakeBatches(reference_it.get(), 9);  // three epochs
  ASSERT_EQ(reference.size(), 9u);
  EXPECT_NE(reference[0].labels, reference[3].labels) << "epochs were not reshuffled";
  for (int64_t readers : {1, 2, 3}) {
    const int64_t b = 12 / readers;
    std::vector<std::vector<Taken>> got;
    for (int64_t r = 0; r < readers; ++r) {
      BatchOptions o = whole;
      o.batch_size = b;
      o.window = 12;
      o.window_offset = r * b;
      o.prefetch = static_cast<int>(r % 2);
      auto it = MakeIterator(&ds, o);
      EXPECT_EQ(it->batches_per_epoch(), 3);
      got.push_back(TakeBatches(it.get(), 9));
      ASSERT_EQ(got.back().size(), 9u);
    }
    for (size_t k = 0; k < reference.size(); ++k) {
      std::vector<int32_t> joined;
      for (int64_t r = 0; r < readers; ++r) {
        const Taken& t = got[r][k];
        EXPECT_EQ(t.epoch, reference[k].epoch) << readers << " readers, reader " << r << " batch " << k;
        EXPECT_EQ(t.labels.size(), static_cast<size_t>(b));
        joined.insert(joined.end(), t.labels.begin(), t.labels.end());
      }
      EXPECT_EQ(joined, reference[k].labels) << readers << " readers, batch " << k;
    }
  }
}

// Unshuffled, the windows are plain ranges of the file order: batch k is
// examples [4k + 1, 4k + 3), and the partial window {8, 9} is dropped.
TEST(BatchIteratorTest, WindowReadsItsOffsetOfEachWindowInFileOrder) {
  const InMemoryDataset ds = MakeDataset(10);
  BatchOptions o;
  o.batch_size = 2;
  o.shuffle = false;
  o.window = 4;
  o.window_offset = 1;
  auto it = MakeIterator(&ds, o);
  EXPECT_EQ(it->batches_per_epoch(), 2);
  EXPECT_EQ(EpochLabels(it.get()), (std::vector<std::vector<int32_t>>{{1, 2}, {5, 6}}));
  EXPECT_EQ(it->epoch(), 1);
  EXPECT_EQ(EpochLabels(it.get()), (std::vector<std::vector<int32_t>>{{1, 2}, {5, 6}}));
}

// skip_batches counts windows: a reader resumed after k of them, across
// epoch ends, gives what the one that took them gives next, with the same
// epoch numbers.
TEST(BatchIteratorTest, WindowSkipBatchesResumesAtTheRightWindowAcrossEpochs) {
  const InMemoryDataset ds = MakeDataset(40);  // 3 windows of 12 an epoch
  BatchOptions o;
  o.batch_size = 4;
  o.seed = 9;
  o.first_epoch = 2;
  o.window = 12;
  o.window_offset = 8;
  auto full = MakeIterator(&ds, o);
  const std::vector<Taken> all = TakeBatches(full.get(), 8);
  ASSERT_EQ(all.size(), 8u);
  EXPECT_EQ(all[2].epoch, 2);
  EXPECT_EQ(all[3].epoch, 3);
  for (int64_t skip : {1, 2, 3, 4, 7}) {
    BatchOptions resumed = o;
    resumed.skip_batches = skip;
    resumed.prefetch = skip % 2 == 0 ? 0 : 2;
    auto it = MakeIterator(&ds, resumed);
    EXPECT_EQ(it->epoch(), 2 + skip / 3) << "skip " << skip;
    const std::vector<Taken> rest = TakeBatches(it.get(), static_cast<int>(all.size() - skip));
    ASSERT_EQ(rest.size(), all.size() - skip);
    for (size_t i = 0; i < rest.size(); ++i) {
      EXPECT_EQ(rest[i].epoch, all[skip + i].epoch) << "skip " << skip << " batch " << skip + i;
      EXPECT_EQ(rest[i].labels, all[skip + i].labels) << "skip " << skip << " batch " << skip + i;
    }
  }
}

// Expects Create to refuse `o` with INVALID_ARGUMENT naming each of `parts`.
void ExpectRefused(const InMemoryDataset& ds, const BatchOptions& o, const std::vector<std::string>& parts) {
  auto it = BatchIterator::Create(&ds, o);
  ASSERT_FALSE(it.ok());
  EXPECT_EQ(it.status().code(), absl::StatusCode::kInvalidArgument) << it.status();
  for (const std::string& p : parts) {
    EXPECT_NE(it.status().message().find(p), std::string::npos) << p << " in " << it.status();
  }
}

TEST(BatchIteratorTest, BadWindowOptionsAreRefusedNamingTheValues) {
  const InMemoryDataset ds = MakeDataset(10);
  BatchOptions o;
  o.batch_size = 4;
  o.window = 10;
  o.window_offset = 6;
  auto fits = MakeIterator(&ds, o);  // the batch ends at the window's end
  ASSERT_NE(fits, nullptr);
  EXPECT_EQ(fits->batches_per_epoch(), 1);

  o.window_offset = 7;
  ExpectRefused(ds, o, {"window=10", "window_offset=7", "batch_size=4"});
  o.window_offset = -1;
  ExpectRefused(ds, o, {"window_offset=-1"});
  o.window_offset = std::numeric_limits<int64_t>::max() - 1;  // offset + batch_size overflows
  ExpectRefused(ds, o, {absl::StrCat("window_offset=", o.window_offset)});
  o.window_offset = 1;
  o.batch_size = std::numeric_limits<int64_t>::max();
  ExpectRefused(ds, o, {absl::StrCat("batch_size=", o.batch_size)});
  o.batch_size = 4;
  o.window = 11;
  ExpectRefused(ds, o, {"window=11", "10 examples"});
  o.window = 8;
  o.drop_remainder = false;
  ExpectRefused(ds, o, {"window=8", "drop_remainder"});
  o.drop_remainder = true;
  o.window = -4;
  ExpectRefused(ds, o, {"window=-4"});
  o.window = 0;  // an offset without a window
  ExpectRefused(ds, o, {"window=0", "window_offset=1"});
  o.window_offset = 0;
  EXPECT_TRUE(BatchIterator::Create(&ds, o).ok());
}

// Pulls `epochs` epochs, dropping each batch before the next.
void Drain(BatchIterator* it, int epochs) {
  for (int e = 0; e < epochs; ++e) {
    while (true) {
      auto b = it->Next();
      ASSERT_TRUE(b.ok());
      if (!b->has_value()) break;
    }
  }
}

TEST(BatchIteratorTest, SteadyStateReusesBuffers) {
  const InMemoryDataset ds = MakeDataset(103);  // a partial last batch too
  CachingAllocator allocator;
  BatchOptions o;
  o.batch_size = 8;
  o.drop_remainder = false;
  o.allocator = &allocator;
  auto it = MakeIterator(&ds, o);
  Drain(it.get(), 2);
  const Allocator::Stats warm = allocator.GetStats();
  EXPECT_GT(warm.system_allocs, 0);
  Drain(it.get(), 5);
  const Allocator::Stats after = allocator.GetStats();
  EXPECT_EQ(after.system_allocs, warm.system_allocs);
  EXPECT_GE(after.cache_hits - warm.cache_hits, 5 * 2 * it->batches_per_epoch());
}

TEST(BatchIteratorTest, PrefetchKeepsAllocationsBounded) {
  const InMemoryDataset ds = MakeDataset(103);
  CachingAllocator allocator;
  BatchOptions o;
  o.batch_size = 8;
  o.drop_remainder = false;
  o.prefetch = 2;
  o.allocator = &allocator;
  auto it = MakeIterator(&ds, o);
  Drain(it.get(), 20);
  // Live batches never exceed the queue, the one being built and the one the
  // consumer holds; each has two tensors, in two sizes (full and partial).
  EXPECT_LE(allocator.GetStats().system_allocs, 2 * 2 * (o.prefetch + 2));
}

TEST(BatchOptionsFromSpecTest, TrainAndEvalDefaults) {
  DatasetSpec spec;
  BatchOptions train = BatchOptionsFromSpec(spec, 64, 9, /*train=*/true);
  EXPECT_EQ(train.batch_size, 64);
  EXPECT_EQ(train.seed, 9u);
  EXPECT_TRUE(train.shuffle);
  EXPECT_TRUE(train.drop_remainder);
  EXPECT_EQ(train.prefetch, 2);
  EXPECT_EQ(train.scale, 255.0f);
  EXPECT_EQ(train.num_epochs, 0);
  BatchOptions eval = BatchOptionsFromSpec(spec, 64, 9, /*train=*/false);
  EXPECT_FALSE(eval.shuffle);
  EXPECT_FALSE(eval.drop_remainder);
  EXPECT_EQ(eval.num_epochs, 1);
  spec.set_no_shuffle(true);
  spec.set_scale(2.0f);
  spec.set_prefetch(5);
  train = BatchOptionsFromSpec(spec, 64, 9, true);
  EXPECT_FALSE(train.shuffle);
  EXPECT_EQ(train.scale, 2.0f);
  EXPECT_EQ(train.prefetch, 5);
}

// Writes a small MNIST-like split (n images of 2x3, label i % 10) under `dir`.
void WriteIdxSplit(const std::string& dir, const std::string& images, const std::string& labels,
                   uint32_t n, bool gzip) {
  std::vector<uint8_t> pixels(n * 6), label_bytes(n);
  for (uint32_t i = 0; i < n; ++i) {
    label_bytes[i] = static_cast<uint8_t>(i % 10);
    for (int k = 0; k < 6; ++k) pixels[i * 6 + k] = static_cast<uint8_t>(i + k);
  }
  const std::string img = IdxBytes({n, 2, 3}, pixels), lab = IdxBytes({n}, label_bytes);
  WriteFile(dir + "/" + images, gzip ? Gzip(img) : img);
  WriteFile(dir + "/" + labels, gzip ? Gzip(lab) : lab);
}

TEST(LoadDatasetTest, IdxDefaultsLimitsAndShapes) {
  const std::string dir = TempPath("mnist");
  ASSERT_EQ(mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST, true);
  WriteIdxSplit(dir, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 20, true);
  WriteIdxSplit(dir, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 7, true);
  WriteIdxSplit(dir, "plain-images", "plain-labels", 5, false);
  DatasetSpec spec;
  spec.set_dir(dir);
  auto train = LoadDataset(spec, true);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->size(), 20);
  EXPECT_EQ(train->example_shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(train->label(13), 3);
  EXPECT_EQ(train->pixels(13)[2], 15);

  spec.set_test_limit(4);
  auto test = LoadDataset(spec, false, {6});  // a flat model input
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->size(), 4);
  EXPECT_EQ(test->example_shape(), (std::vector<int64_t>{6}));

  auto mismatch = LoadDataset(spec, false, {5});
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("t10k-images-idx3-ubyte.gz"), std::string::npos);

  auto bad_classes = LoadDataset(spec, true, {}, /*num_classes=*/5);
  EXPECT_NE(bad_classes.status().message().find("out of range"), std::string::npos)
      << bad_classes.status();

  spec.set_train_images("plain-images");         // relative to dir
  spec.set_train_labels(dir + "/plain-labels");  // absolute
  auto plain = LoadDataset(spec, true);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->size(), 5);

  DatasetSpec empty;
  EXPECT_EQ(LoadDataset(empty, true).status().code(), absl::StatusCode::kInvalidArgument);
  spec.set_train_limit(-1);
  EXPECT_FALSE(LoadDataset(spec, true).ok());
}

TEST(LoadDatasetTest, TFRecordFilesInOrderWithLimit) {
  const std::vector<uint8_t> pixels = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  ASSERT_TRUE(WriteImageExamples(TempPath("part-0.tfrecord"), pixels, {1, 2, 3}).ok());
  ASSERT_TRUE(WriteImageExamples(TempPath("part-1.tfrecord"), pixels, {4, 5, 6}).ok());
  DatasetSpec spec;
  spec.set_format(DatasetSpec::TFRECORD);
  spec.set_dir(::testing::TempDir());
  spec.add_train_files("part-0.tfrecord");
  spec.add_train_files("part-1.tfrecord");
  auto ds = LoadDataset(spec, true, {2, 2});
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->size(), 6);
  EXPECT_EQ(ds->label(3), 4);
  EXPECT_EQ(ds->pixels(3)[0], 0);
  EXPECT_EQ(ds->pixels(2)[3], 11);

  spec.set_train_limit(4);
  ds = LoadDataset(spec, true, {2, 2});
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->size(), 4);

  EXPECT_FALSE(LoadDataset(spec, true).ok());  // no example shape
  auto wrong = LoadDataset(spec, true, {3, 2});
  EXPECT_NE(wrong.status().message().find("part-0.tfrecord: record 0"), std::string::npos)
      << wrong.status();
  auto classes = LoadDataset(spec, true, {2, 2}, /*num_classes=*/4);
  EXPECT_NE(classes.status().message().find("part-1.tfrecord: label 4"), std::string::npos)
      << classes.status();
  EXPECT_FALSE(LoadDataset(spec, /*train=*/false, {2, 2}).ok());  // no test_files
}

// ---- Counting a split from its headers ----

TEST(CountExamplesTest, IdxFromTheHeadersWithTheLimitApplied) {
  const std::string dir = TempPath("count-mnist");
  ASSERT_EQ(mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST, true);
  WriteIdxSplit(dir, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 20, true);
  WriteIdxSplit(dir, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 7, true);
  DatasetSpec spec;
  spec.set_dir(dir);
  for (bool train : {true, false}) {
    auto n = CountExamples(spec, train);
    ASSERT_TRUE(n.ok()) << n.status();
    auto loaded = LoadDataset(spec, train);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(*n, loaded->size());
  }
  spec.set_train_limit(8);
  EXPECT_EQ(CountExamples(spec, true).value_or(-1), 8);
  spec.set_train_limit(800);
  EXPECT_EQ(CountExamples(spec, true).value_or(-1), 20);
  spec.set_train_limit(-1);
  EXPECT_EQ(CountExamples(spec, true).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CountExamples(DatasetSpec(), true).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CountExamplesTest, MalformedIdxHeadersAreRefusedNamingTheFile) {
  const std::string dir = TempPath("count-bad");
  ASSERT_EQ(mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST, true);
  WriteIdxSplit(dir, "images", "labels", 5, false);
  DatasetSpec spec;
  spec.set_dir(dir);
  spec.set_train_images("images");
  spec.set_train_labels("labels");
  ASSERT_EQ(CountExamples(spec, true).value_or(-1), 5);

  // Labels for another number of examples.
  WriteFile(dir + "/labels6", IdxBytes({6}, {0, 1, 2, 0, 1, 2}));
  spec.set_train_labels("labels6");
  auto n = CountExamples(spec, true);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument) << n.status();
  EXPECT_NE(n.status().message().find("holds 5 images"), std::string::npos) << n.status();

  // Not an IDX file; an IDX header whose dims overflow; the files swapped.
  WriteFile(dir + "/text", "images, honestly");
  spec.set_train_images("text");
  n = CountExamples(spec, true);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument) << n.status();
  EXPECT_NE(n.status().message().find(dir + "/text: not an IDX file"), std::string::npos) << n.status();
  WriteFile(dir + "/huge", IdxBytes({1u << 20, 1u << 20, 1u << 24}, {}));
  spec.set_train_images("huge");
  n = CountExamples(spec, true);
  EXPECT_NE(n.status().message().find("implausible IDX header"), std::string::npos) << n.status();
  spec.set_train_images("labels");
  spec.set_train_labels("images");
  n = CountExamples(spec, true);
  EXPECT_NE(n.status().message().find("expected an images file"), std::string::npos) << n.status();
  spec.set_train_images(dir + "/none");
  EXPECT_EQ(CountExamples(spec, true).status().code(), absl::StatusCode::kNotFound);
}

TEST(CountExamplesTest, TFRecordFilesInOrderWithLimitAndTruncatedFilesRefused) {
  const std::vector<uint8_t> pixels = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  ASSERT_TRUE(WriteImageExamples(TempPath("count-0.tfrecord"), pixels, {1, 2, 3}).ok());
  ASSERT_TRUE(WriteImageExamples(TempPath("count-1.tfrecord"), pixels, {4, 5, 6}).ok());
  DatasetSpec spec;
  spec.set_format(DatasetSpec::TFRECORD);
  spec.set_dir(::testing::TempDir());
  spec.add_train_files("count-0.tfrecord");
  spec.add_train_files("count-1.tfrecord");
  EXPECT_EQ(CountExamples(spec, true).value_or(-1), 6);
  spec.set_train_limit(4);
  EXPECT_EQ(CountExamples(spec, true).value_or(-1), 4);
  spec.set_train_limit(3);  // the first file is enough: the second is not opened
  spec.add_train_files("count-none.tfrecord");
  EXPECT_EQ(CountExamples(spec, true).value_or(-1), 3);
  spec.set_train_limit(0);
  EXPECT_EQ(CountExamples(spec, true).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CountExamples(spec, false).status().code(), absl::StatusCode::kInvalidArgument);  // no test_files

  std::string cut = testing::ReadFile(TempPath("count-1.tfrecord"));
  cut.resize(cut.size() - 1);
  WriteFile(TempPath("count-cut.tfrecord"), cut);
  DatasetSpec truncated = spec;
  truncated.clear_train_files();
  truncated.add_train_files("count-0.tfrecord");
  truncated.add_train_files("count-cut.tfrecord");
  auto n = CountExamples(truncated, true);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kDataLoss) << n.status();
  EXPECT_NE(n.status().message().find("count-cut.tfrecord: corrupt TFRecord at byte offset 48"), std::string::npos)
      << n.status();
}

}  // namespace
}  // namespace data
}  // namespace weft

namespace weft {
namespace data {
namespace {

// A daemon's --data_root: files outside it, or reached through a symbolic
// link below it, are refused; files inside load as before.
TEST(DataRootTest, ConfinesEveryFileToTheRoot) {
  const std::string root = TempPath("data-root");
  const std::string inside = root + "/mnist";
  const std::string outside = TempPath("outside-root");
  for (const std::string& d : {root, inside, outside}) ASSERT_TRUE(mkdir(d.c_str(), 0755) == 0 || errno == EEXIST);
  WriteIdxSplit(inside, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 4, true);
  WriteIdxSplit(outside, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 4, true);
  unlink((root + "/link").c_str());
  ASSERT_EQ(symlink(outside.c_str(), (root + "/link").c_str()), 0);
  auto confined = ConfinedRoot::Open(root, false);
  ASSERT_TRUE(confined.ok()) << confined.status();
  SetDataRoot(*confined);
  DatasetSpec spec;
  spec.set_dir(inside);
  EXPECT_TRUE(LoadDataset(spec, true).ok());
  spec.set_dir(outside);
  auto out = LoadDataset(spec, true);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kPermissionDenied) << out.status();
  EXPECT_NE(out.status().message().find("outside the data root"), std::string::npos) << out.status();
  auto counted = CountExamples(spec, true);
  EXPECT_EQ(counted.status().code(), absl::StatusCode::kPermissionDenied) << counted.status();
  spec.set_dir(root + "/link");
  auto linked = LoadDataset(spec, true);
  EXPECT_EQ(linked.status().code(), absl::StatusCode::kPermissionDenied) << linked.status();
  spec.set_dir(inside + "/../../outside-root");
  EXPECT_FALSE(LoadDataset(spec, true).ok());
  SetDataRoot(std::nullopt);
  spec.set_dir(outside);
  EXPECT_TRUE(LoadDataset(spec, true).ok());  // without a root, as `weft train` reads
}

}  // namespace
}  // namespace data
}  // namespace weft
