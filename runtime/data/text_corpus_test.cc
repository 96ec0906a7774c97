// TEXT datasets: a corpus's bytes as sequences whose labels are the next
// bytes, split into train and test at the test fraction, through the same
// LoadDataset, CountExamples and BatchIterator as image data.
#include "runtime/data/text_corpus.h"

#include <sys/stat.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/confined_root.h"
#include "gtest/gtest.h"
#include "runtime/data/dataset.h"
#include "runtime/data/test_files.h"

namespace weft {
namespace data {
namespace {

using testing::TempPath;
using testing::WriteFile;

// 42 bytes over two files, so that an example crosses the boundary.
DatasetSpec Corpus(int64_t length, float test_fraction = 0.25f) {
  WriteFile(TempPath("corpus-1.txt"), "abcdefghijklmnopqrst");
  WriteFile(TempPath("corpus-2.txt"), "uvwxyzABCDEFGHIJKLMNO.");
  DatasetSpec spec;
  spec.set_format(DatasetSpec::TEXT);
  spec.set_dir(TempPath(""));
  spec.add_train_files("corpus-1.txt");
  spec.add_train_files("corpus-2.txt");
  spec.mutable_text()->set_sequence_length(length);
  spec.mutable_text()->set_test_fraction(test_fraction);
  return spec;
}

std::string Bytes(const InMemoryDataset& ds, int64_t i) {
  return std::string(reinterpret_cast<const char*>(ds.pixels(i)), ds.example_elems());
}
std::string Labels(const InMemoryDataset& ds, int64_t i) {
  std::string s;
  for (int64_t j = 0; j < ds.label_elems(); ++j) s += static_cast<char>(ds.labels(i)[j]);
  return s;
}

TEST(TextCorpusTest, ExamplesAreSequencesLabelledWithTheNextBytes) {
  const DatasetSpec spec = Corpus(8);
  // 42 bytes: floor(42 * 0.25) = 10 for test, 32 for train: (32 - 1) / 8 = 3
  // train examples and (10 - 1) / 8 = 1 test example.
  auto train = LoadDataset(spec, true, {8}, 256);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->size(), 3);
  EXPECT_EQ(*CountExamples(spec, true), 3);
  EXPECT_EQ(Bytes(*train, 0), "abcdefgh");
  EXPECT_EQ(Labels(*train, 0), "bcdefghi");
  EXPECT_EQ(Bytes(*train, 2), "qrstuvwx");  // across the two files
  EXPECT_EQ(Labels(*train, 2), "rstuvwxy");
  auto test = LoadDataset(spec, false, {8}, 256);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->size(), 1);
  EXPECT_EQ(*CountExamples(spec, false), 1);
  EXPECT_EQ(Bytes(*test, 0), "GHIJKLMN");  // the last 10 bytes are "GHIJKLMNO."
  EXPECT_EQ(Labels(*test, 0), "HIJKLMNO");
  // A shard keeps each example's labels with it.
  auto shard = train->Shard(1, 2);
  ASSERT_TRUE(shard.ok());
  ASSERT_EQ(shard->size(), 1);
  EXPECT_EQ(Labels(*shard, 0), "jklmnopq");
  // train_limit keeps the first examples.
  DatasetSpec limited = spec;
  limited.set_train_limit(2);
  EXPECT_EQ(LoadDataset(limited, true, {8}, 0)->size(), 2);
}

TEST(TextCorpusTest, BatchesHoldEveryPositionsLabelAndUnscaledIds) {
  const DatasetSpec spec = Corpus(4);
  auto train = LoadDataset(spec, true, {4}, 0);
  ASSERT_TRUE(train.ok()) << train.status();
  BatchOptions o = BatchOptionsFromSpec(spec, 2, 7, /*train=*/true);
  EXPECT_EQ(o.scale, 1.0f);
  o.shuffle = false;
  o.prefetch = 0;
  auto it = BatchIterator::Create(&*train, o);
  ASSERT_TRUE(it.ok()) << it.status();
  auto batch = (*it)->Next();
  ASSERT_TRUE(batch.ok() && batch->has_value());
  const Batch& b = **batch;
  EXPECT_EQ(b.size(), 2);
  EXPECT_EQ(b.predictions(), 8);
  EXPECT_EQ(b.features.shape(), TensorShape({2, 4}));
  EXPECT_EQ(b.features.data<float>()[5], static_cast<float>('f'));
  EXPECT_EQ(b.labels.data<int32_t>()[5], 'g');
  EXPECT_EQ(b.labels.data<int32_t>()[7], 'i');
}

TEST(TextCorpusTest, BadSpecsAndBytesAreRefusedByName) {
  struct Case {
    DatasetSpec spec;
    std::vector<int64_t> shape;
    int64_t num_classes;
    std::string want;
  };
  std::vector<Case> cases;
  cases.push_back({Corpus(0), {}, 0, "sequence_length must be in [1, "});
  cases.push_back({Corpus(4, 1.5f), {4}, 0, "test_fraction must be in (0, 1), got 1.5"});
  cases.push_back({Corpus(4), {5}, 0, "examples are [sequence_length=4] byte ids; the model's input_shape is [5]"});
  cases.push_back({Corpus(4), {4}, 100, "byte 100 at offset 3 of the train split is not below num_classes=100"});
  DatasetSpec no_files = Corpus(4);
  no_files.clear_train_files();
  cases.push_back({no_files, {4}, 0, "no train_files (the corpus)"});
  DatasetSpec with_test = Corpus(4);
  with_test.add_test_files("corpus-1.txt");
  cases.push_back({with_test, {4}, 0, "not test_files"});
  DatasetSpec scaled = Corpus(4);
  scaled.set_scale(255);
  cases.push_back({scaled, {4}, 0, "byte ids, which scale 255 would change"});
  DatasetSpec missing = Corpus(4);
  missing.add_train_files("no-such-file.txt");
  cases.push_back({missing, {4}, 0, "no-such-file.txt"});
  for (const Case& c : cases) {
    auto ds = LoadDataset(c.spec, true, c.shape, c.num_classes);
    ASSERT_FALSE(ds.ok()) << c.want;
    EXPECT_NE(ds.status().message().find(c.want), std::string::npos) << c.want << ": " << ds.status();
  }
}

// A corpus is confined to a daemon's --data_root like every dataset file:
// one outside it is refused, by LoadDataset and by CountExamples.
TEST(TextCorpusTest, ACorpusOutsideTheDataRootIsRefused) {
  const DatasetSpec outside = Corpus(8);  // under the test's temp dir
  const std::string root = TempPath("text-root");
  ASSERT_TRUE(mkdir(root.c_str(), 0755) == 0 || errno == EEXIST);
  auto confined = ConfinedRoot::Open(root, false);
  ASSERT_TRUE(confined.ok()) << confined.status();
  SetDataRoot(*confined);
  auto loaded = LoadDataset(outside, true, {8}, 256);
  auto counted = CountExamples(outside, true);
  SetDataRoot(std::nullopt);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kPermissionDenied) << loaded.status();
  EXPECT_NE(loaded.status().message().find("outside the data root"), std::string::npos) << loaded.status();
  EXPECT_EQ(counted.status().code(), absl::StatusCode::kPermissionDenied) << counted.status();
}

}  // namespace
}  // namespace data
}  // namespace weft
