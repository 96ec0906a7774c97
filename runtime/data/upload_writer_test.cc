#include "runtime/data/upload_writer.h"


#include <string>
#include <vector>

#include "common/sha256.h"
#include "gtest/gtest.h"
#include "runtime/data/dataset.h"
#include "runtime/data/test_files.h"
#include "runtime/data/uploaded_dataset.h"

namespace weft {
namespace data {
namespace {

using testing::Gzip;
using testing::IdxBytes;
using testing::DirEntries;

ConfinedRoot FreshRoot(const std::string& name) {
  auto root = ConfinedRoot::Open(testing::TempPath(name), /*create=*/true);
  EXPECT_TRUE(root.ok()) << root.status();
  return *root;
}

struct Files {
  std::string train_images = IdxBytes({3, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  std::string train_labels = IdxBytes({3}, {0, 1, 2});
  std::string test_images = Gzip(IdxBytes({1, 2, 2}, {9, 9, 9, 9}));
  std::string test_labels = IdxBytes({1}, {1});
};

absl::Status Send(UploadWriter* w, const std::string& name, const std::string& bytes, size_t chunk = 5) {
  if (absl::Status s = w->StartFile(name, static_cast<int64_t>(bytes.size())); !s.ok()) return s;
  for (size_t i = 0; i < bytes.size(); i += chunk) {
    if (absl::Status s = w->Append(absl::string_view(bytes).substr(i, chunk)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string IdFor(const Files& f) {
  std::vector<UploadedFileDigest> d;
  for (auto [name, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"test_labels", f.test_labels}, {"train_images", f.train_images},
           {"train_labels", f.train_labels}, {"test_images", f.test_images}}) {
    Sha256 h;
    h.Update(bytes);
    d.push_back({name, static_cast<int64_t>(bytes.size()), h.Finish()});
  }
  return UploadIdOf(d);
}

TEST(UploadWriterTest, StoresChecksAndLoadsLikeFiles) {
  const ConfinedRoot root = FreshRoot("upload_ok");
  Files f;
  auto w = UploadWriter::Create(root);
  ASSERT_TRUE(w.ok()) << w.status();
  // Out of canonical order: the id does not depend on it.
  ASSERT_TRUE(Send(w->get(), "test_images", f.test_images).ok());
  ASSERT_TRUE(Send(w->get(), "train_labels", f.train_labels).ok());
  ASSERT_TRUE(Send(w->get(), "train_images", f.train_images).ok());
  ASSERT_TRUE(Send(w->get(), "test_labels", f.test_labels).ok());
  auto summary = (*w)->Finish();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->id, IdFor(f));
  EXPECT_EQ(summary->train_examples, 3);
  EXPECT_EQ(summary->test_examples, 1);
  auto committed = (*w)->Commit();
  ASSERT_TRUE(committed.ok() && *committed);
  w->reset();
  EXPECT_EQ(DirEntries(root.path()), std::vector<std::string>{summary->id});

  SetUploadRoot(root);
  DatasetSpec spec;
  spec.set_upload_id(summary->id);
  auto train = LoadDataset(spec, /*train=*/true);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->size(), 3);
  EXPECT_EQ(train->label(2), 2);
  EXPECT_EQ(train->pixels(1)[0], 4);
  EXPECT_EQ(*CountExamples(spec, /*train=*/false), 1);
  auto stored = StoredUploadFiles(root, summary->id);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->size(), 4u);

  // The same bytes again: nothing new is kept.
  auto again = UploadWriter::Create(root);
  for (auto [n, b] : std::vector<std::pair<std::string, std::string>>{{"train_images", f.train_images},
                                                                     {"train_labels", f.train_labels},
                                                                     {"test_images", f.test_images},
                                                                     {"test_labels", f.test_labels}}) {
    ASSERT_TRUE(Send(again->get(), n, b).ok());
  }
  ASSERT_EQ((*again)->Finish()->id, summary->id);
  EXPECT_FALSE(*(*again)->Commit());
  again->reset();
  EXPECT_EQ(DirEntries(root.path()), std::vector<std::string>{summary->id});
  SetUploadRoot(std::nullopt);
}

TEST(UploadWriterTest, RefusesBadUploadsAndLeavesNothing) {
  const ConfinedRoot root = FreshRoot("upload_bad");
  Files f;
  struct Case {
    std::string what;
    std::function<absl::Status(UploadWriter*)> run;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"unknown name", [&](UploadWriter* w) { return w->StartFile("../etc", 3); }, "unknown file"},
      {"twice", [&](UploadWriter* w) {
         (void)Send(w, "train_labels", f.train_labels);
         return w->StartFile("train_labels", 1);
       }, "sent twice"},
      {"too many bytes", [&](UploadWriter* w) {
         (void)w->StartFile("train_labels", 2);
         return w->Append("abc");
       }, "more bytes than its declared size 2"},
      {"too few bytes", [&](UploadWriter* w) {
         (void)w->StartFile("train_labels", 20);
         (void)w->Append("abc");
         return w->Finish().status();
       }, "declared 20 bytes but 3 arrived"},
      {"count mismatch", [&](UploadWriter* w) {
         (void)Send(w, "train_images", f.train_images);
         (void)Send(w, "train_labels", IdxBytes({2}, {0, 1}));
         return w->Finish().status();
       }, "holds 3 examples but train_labels holds 2 labels"},
      {"not idx", [&](UploadWriter* w) {
         (void)Send(w, "train_images", "hello world, not IDX");
         (void)Send(w, "train_labels", f.train_labels);
         return w->Finish().status();
       }, "file train_images"},
      {"truncated", [&](UploadWriter* w) {
         (void)Send(w, "train_images", f.train_images.substr(0, f.train_images.size() - 1));
         (void)Send(w, "train_labels", f.train_labels);
         return w->Finish().status();
       }, "bytes, but its IDX header describes"},
      {"half a test split", [&](UploadWriter* w) {
         (void)Send(w, "train_images", f.train_images);
         (void)Send(w, "train_labels", f.train_labels);
         (void)Send(w, "test_images", f.test_images);
         return w->Finish().status();
       }, "test_labels is missing"},
  };
  for (const Case& c : cases) {
    auto w = UploadWriter::Create(root);
    ASSERT_TRUE(w.ok());
    absl::Status s = c.run(w->get());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << s;
    EXPECT_NE(s.message().find(c.error), std::string::npos) << c.what << ": " << s;
    w->reset();
    EXPECT_TRUE(DirEntries(root.path()).empty()) << c.what;
  }
}

TEST(UploadWriterTest, UploadIdsAreCheckedBeforeAnyPath) {
  for (const std::string& id : {std::string("../../etc/passwd"), std::string(64, 'A'), std::string(63, 'a'),
                                std::string("/") + std::string(63, 'a')}) {
    DatasetSpec spec;
    spec.set_upload_id(id);
    auto loaded = LoadDataset(spec, true);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_NE(loaded.status().message().find("is not a dataset id"), std::string::npos);
  }
  DatasetSpec tfrecord;
  tfrecord.set_upload_id(std::string(64, 'a'));
  tfrecord.set_format(DatasetSpec::TFRECORD);
  EXPECT_EQ(CountExamples(tfrecord, true).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace data
}  // namespace weft
