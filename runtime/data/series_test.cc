// SERIES datasets: one CSV column as windows of values whose targets are the
// values after them, split into train and test at the test fraction and
// standardised with the train split's figures, through the same
// LoadDataset, CountExamples and BatchIterator as every dataset.
#include "runtime/data/series.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <memory>
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

// A SERIES spec of `csv`, written to `name` in the test's directory.
DatasetSpec SeriesFile(const std::string& name, const std::string& csv, const std::string& column, int64_t window,
                       int64_t horizon, bool raw, float test_fraction) {
  WriteFile(TempPath(name), csv);
  DatasetSpec spec;
  spec.set_format(DatasetSpec::SERIES);
  spec.set_dir(TempPath(""));
  spec.add_train_files(name);
  spec.mutable_series()->set_column(column);
  spec.mutable_series()->set_window(window);
  spec.mutable_series()->set_horizon(horizon);
  spec.mutable_series()->set_test_fraction(test_fraction);
  spec.mutable_series()->set_raw(raw);
  return spec;
}

// 20 rows whose `v` column is 0, 1, ..., 19 (in a middle column, with
// Windows line ends and a blank line).
DatasetSpec Series(int64_t window, int64_t horizon, bool raw, float test_fraction = 0.25f) {
  std::string csv = "date,v,note\r\n";
  for (int i = 0; i < 20; ++i) absl::StrAppend(&csv, "2012/01/", i + 1, ",", i, ".0,x\r\n", i == 9 ? "\r\n" : "");
  return SeriesFile("series.csv", csv, "v", window, horizon, raw, test_fraction);
}

std::vector<float> Values(const float* p, int64_t n) { return std::vector<float>(p, p + n); }

TEST(SeriesTest, ExamplesAreWindowsWhoseTargetsFollowThem) {
  const DatasetSpec spec = Series(4, 2, /*raw=*/true);
  // 20 values: floor(20 * 0.25) = 5 for test, 15 for train: 15 - 4 - 2 + 1 = 10
  // train examples and 5 - 4 - 2 + 1 = 0 test examples.
  absl::StatusOr<InMemoryDataset> train = LoadDataset(spec, /*train=*/true);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(train->float_examples());
  EXPECT_EQ(train->size(), 10);
  EXPECT_EQ(train->example_shape(), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(train->label_elems(), 2);
  for (int64_t i = 0; i < train->size(); ++i) {
    const float f = static_cast<float>(i);
    EXPECT_EQ(Values(train->values(i), 4), (std::vector<float>{f, f + 1, f + 2, f + 3})) << i;
    EXPECT_EQ(Values(train->targets(i), 2), (std::vector<float>{f + 4, f + 5})) << i;
  }
  absl::StatusOr<InMemoryDataset> test = LoadDataset(spec, /*train=*/false);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->size(), 0);
  // Counting agrees, from the same file.
  EXPECT_EQ(CountExamples(spec, true).value_or(-1), 10);
  EXPECT_EQ(CountExamples(spec, false).value_or(-1), 0);
}

TEST(SeriesTest, TestWindowsLieInTheTestSplitAndShareTheTrainStandardisation) {
  const DatasetSpec spec = Series(2, 1, /*raw=*/false, 0.5f);
  // Train: values 0..9, mean 4.5, population deviation sqrt(8.25).
  const double mean = 4.5, sd = std::sqrt(8.25);
  auto z = [&](double v) { return static_cast<float>((v - mean) / sd); };
  absl::StatusOr<InMemoryDataset> train = LoadDataset(spec, true, {2});
  absl::StatusOr<InMemoryDataset> test = LoadDataset(spec, false, {2, 1});
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(train->example_shape(), (std::vector<int64_t>{2}));
  ASSERT_EQ(train->size(), 8);
  ASSERT_EQ(test->size(), 8);  // values 10..19, windows of 2 and a target
  EXPECT_FLOAT_EQ(train->values(0)[0], z(0));
  EXPECT_FLOAT_EQ(train->targets(7)[0], z(9));
  EXPECT_FLOAT_EQ(test->values(0)[0], z(10));
  EXPECT_FLOAT_EQ(test->targets(7)[0], z(19));
  // Limits and shards index the same windows.
  absl::StatusOr<InMemoryDataset> shard = test->Shard(1, 2);
  ASSERT_TRUE(shard.ok()) << shard.status();
  ASSERT_EQ(shard->size(), 4);
  EXPECT_FLOAT_EQ(shard->values(1)[0], z(13));
  EXPECT_FLOAT_EQ(shard->targets(1)[0], z(15));
}

TEST(SeriesTest, BatchesCarryFloatTargets) {
  const DatasetSpec spec = Series(3, 1, /*raw=*/true);
  absl::StatusOr<InMemoryDataset> train = LoadDataset(spec, true);
  ASSERT_TRUE(train.ok()) << train.status();
  const BatchOptions o = BatchOptionsFromSpec(spec, 4, /*seed=*/7, /*train=*/true);
  EXPECT_EQ(o.scale, 1.0f);
  auto it = BatchIterator::Create(&*train, o);
  ASSERT_TRUE(it.ok()) << it.status();
  absl::StatusOr<std::optional<Batch>> b = (*it)->Next();
  ASSERT_TRUE(b.ok() && b->has_value()) << b.status();
  const Batch& batch = **b;
  ASSERT_EQ(batch.labels.dtype(), DType::kFloat32);
  ASSERT_EQ(batch.features.shape(), TensorShape({4, 3, 1}));
  ASSERT_EQ(batch.labels.NumElements(), 4);
  for (int64_t r = 0; r < 4; ++r) {
    // Shuffled: each row is some window x, x+1, x+2 with target x+3.
    const float* f = batch.features.data<float>() + r * 3;
    EXPECT_EQ(f[1], f[0] + 1);
    EXPECT_EQ(f[2], f[0] + 2);
    EXPECT_EQ(batch.labels.data<float>()[r], f[0] + 3);
  }
}

TEST(SeriesTest, BadSpecsAndFilesAreRefusedNamingWhatIsWrong) {
  auto error = [](const DatasetSpec& spec) { return LoadDataset(spec, true).status(); };
  DatasetSpec spec = Series(0, 1, true);
  EXPECT_NE(std::string(error(spec).message()).find("series.window"), std::string::npos) << error(spec);
  spec = Series(4, 1, true);
  spec.mutable_series()->set_column("w");
  EXPECT_NE(std::string(error(spec).message()).find("no column 'w'"), std::string::npos) << error(spec);
  spec = Series(4, 1, true);
  spec.add_train_files("series.csv");
  EXPECT_NE(std::string(error(spec).message()).find("one CSV file"), std::string::npos) << error(spec);
  spec = Series(4, 1, true);
  spec.set_scale(255);
  EXPECT_NE(std::string(error(spec).message()).find("scale"), std::string::npos) << error(spec);
  spec = Series(4, 1, true);
  spec.mutable_series()->set_test_fraction(1);
  EXPECT_NE(std::string(error(spec).message()).find("test_fraction"), std::string::npos) << error(spec);
  spec = Series(4, 1, true);
  EXPECT_NE(std::string(LoadDataset(spec, true, {5}).status().message()).find("[window=4, inputs=1]"),
            std::string::npos);
  // A constant series cannot be standardised.
  WriteFile(TempPath("flat.csv"), "v\n1\n1\n1\n1\n1\n1\n1\n1\n");
  spec = Series(2, 1, false);
  spec.set_train_files(0, "flat.csv");
  EXPECT_NE(std::string(error(spec).message()).find("do not vary"), std::string::npos) << error(spec);
}

TEST(SeriesTest, CsvErrorsNameTheFileLineAndColumn) {
  auto parse = [](absl::string_view csv, std::vector<std::string> columns) {
    return ParseCsvColumns(csv, columns, "f.csv");
  };
  EXPECT_EQ(parse("a,b\n1,2\n3,4", {"b", "a"}).value_or(std::vector<std::vector<float>>{}),
            (std::vector<std::vector<float>>{{2, 4}, {1, 3}}));
  absl::Status s = parse("a,b\n1,2\n3,oops\n", {"b"}).status();
  EXPECT_NE(std::string(s.message()).find("f.csv:3: column 'b' holds 'oops'"), std::string::npos) << s;
  s = parse("a,b\n1,2\n3\n", {"b"}).status();
  EXPECT_NE(std::string(s.message()).find("f.csv:3: 1 fields where the header has 2"), std::string::npos) << s;
  s = parse("a,b\n1,nan\n", {"a", "b"}).status();
  EXPECT_NE(std::string(s.message()).find("column 'b' holds 'nan', not a finite number"), std::string::npos) << s;
  s = parse("", {"b"}).status();
  EXPECT_NE(std::string(s.message()).find("no header line"), std::string::npos) << s;
}

// Several input columns: features are rows of the inputs, targets the target
// column's values after them, each column standardised on its own.
TEST(SeriesTest, SeveralInputColumnsMakeRowsOfFeatures) {
  std::string csv = "t,a,b\n";
  for (int i = 0; i < 12; ++i) absl::StrAppend(&csv, i, ",", 2 * i, ",", 100 - i, "\n");
  DatasetSpec spec = SeriesFile("multi.csv", csv, "t", /*window=*/3, /*horizon=*/1, /*raw=*/true, 0.25f);
  spec.mutable_series()->add_inputs("b");
  spec.mutable_series()->add_inputs("a");
  // 12 rows: 9 train rows make 9 - 3 - 1 + 1 = 6 examples.
  absl::StatusOr<InMemoryDataset> train = LoadDataset(spec, true, {3, 2});
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_EQ(train->size(), 6);
  EXPECT_EQ(train->example_shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(Values(train->values(2), 6), (std::vector<float>{98, 4, 97, 6, 96, 8}));
  EXPECT_EQ(train->targets(2)[0], 5);
  EXPECT_NE(std::string(LoadDataset(spec, true, {3}).status().message()).find("[window=3, inputs=2]"),
            std::string::npos);
  // Standardised: column a (0, 2, ..., 16 in train) and b each by their own figures.
  spec.mutable_series()->set_raw(false);
  train = LoadDataset(spec, true);
  ASSERT_TRUE(train.ok()) << train.status();
  const double sd_a = std::sqrt(4 * 60.0 / 9);  // population deviation of 0, 2, ..., 16
  EXPECT_NEAR(train->values(0)[1], (0 - 8) / sd_a, 1e-6);
  EXPECT_NEAR(train->values(0)[0], (100 - 96) / (sd_a / 2), 1e-6);
  spec.mutable_series()->add_inputs("b");
  EXPECT_NE(std::string(LoadDataset(spec, true).status().message()).find("'b' twice"), std::string::npos);
}

// A series is confined to a daemon's --data_root like every dataset file,
// and a file above kMaxSeriesBytes is refused before it is read.
TEST(SeriesTest, AFileOutsideTheDataRootOrTooLargeIsRefused) {
  const DatasetSpec outside = Series(4, 1, /*raw=*/true);  // under the test's temp dir
  const std::string root = TempPath("series-root");
  ASSERT_TRUE(mkdir(root.c_str(), 0755) == 0 || errno == EEXIST);
  auto confined = ConfinedRoot::Open(root, false);
  ASSERT_TRUE(confined.ok()) << confined.status();
  SetDataRoot(*confined);
  auto loaded = LoadDataset(outside, true);
  auto counted = CountExamples(outside, true);
  SetDataRoot(std::nullopt);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kPermissionDenied) << loaded.status();
  EXPECT_NE(loaded.status().message().find("outside the data root"), std::string::npos) << loaded.status();
  EXPECT_EQ(counted.status().code(), absl::StatusCode::kPermissionDenied) << counted.status();

  // A sparse file one byte over the cap: refused by its size alone.
  DatasetSpec big = Series(4, 1, /*raw=*/true);
  const std::string path = TempPath("huge-series.csv");
  WriteFile(path, "v\n1\n");
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(kMaxSeriesBytes + 1)), 0) << errno;
  big.set_train_files(0, "huge-series.csv");
  absl::Status s = LoadDataset(big, true).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("more than the 268435456"), std::string::npos) << s;
  ::unlink(path.c_str());
}

TEST(SeriesTest, WindowsMustFitTheirArrays) {
  auto values = [](size_t n) { return std::make_shared<const std::vector<float>>(n); };
  EXPECT_TRUE(InMemoryDataset::CreateWindows({3}, values(5), values(5), 2, 1, 3, 1).ok());
  // The second window's target would be value 5 of 5.
  EXPECT_FALSE(InMemoryDataset::CreateWindows({3}, values(5), values(5), 3, 1, 3, 1).ok());
  // Features 2 apart: the second window ends at value 5 of 4.
  EXPECT_FALSE(InMemoryDataset::CreateWindows({3}, values(4), values(9), 2, 2, 3, 1).ok());
  EXPECT_FALSE(InMemoryDataset::CreateWindows({3}, values(5), values(5), int64_t{1} << 62, 4, 3, 1).ok());
  EXPECT_FALSE(InMemoryDataset::CreateWindows({3}, values(5), values(5), 1, 0, 3, 1).ok());
  EXPECT_FALSE(InMemoryDataset::CreateWindows({3}, nullptr, values(5), 1, 1, 3, 1).ok());
  EXPECT_TRUE(InMemoryDataset::CreateWindows({3}, values(0), values(0), 0, 1, 3, 1).ok());
}

}  // namespace
}  // namespace data
}  // namespace weft
