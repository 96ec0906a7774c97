#include "master/dataset_uploads.h"


#include <string>
#include <vector>

#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "master/dataset_push.h"
#include "master/in_process_cluster.h"
#include "runtime/data/test_files.h"
#include "worker/dataset_cache.h"

namespace weft {
namespace master {
namespace {

using data::testing::DirEntries;
using data::testing::IdxBytes;

Caller User(const std::string& name, bool admin = false) {
  Caller c;
  c.kind = Caller::Kind::kUser;
  c.name = name;
  c.admin = admin;
  c.credential = "token";
  return c;
}

struct Arrays {
  std::string images = IdxBytes({4, 2, 2}, std::vector<uint8_t>(16, 7));
  std::string labels = IdxBytes({4}, {0, 1, 0, 1});
};

absl::StatusOr<UploadDatasetResponse> Upload(DatasetUploads* store, const Caller& who, const Arrays& a,
                                             int64_t declared_labels = -1) {
  ASSIGN_OR_RETURN(std::unique_ptr<DatasetUploads::Upload> up, store->Begin(who));
  auto send = [&](const std::string& name, const std::string& bytes, int64_t size) -> absl::Status {
    UploadDatasetRequest m;
    m.mutable_file()->set_name(name);
    m.mutable_file()->set_size(size);
    RETURN_IF_ERROR(up->OnMessage(m));
    for (size_t i = 0; i < bytes.size(); i += 7) {
      UploadDatasetRequest d;
      d.set_data(bytes.substr(i, 7));
      RETURN_IF_ERROR(up->OnMessage(d));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(send("train_images", a.images, static_cast<int64_t>(a.images.size())));
  RETURN_IF_ERROR(send("train_labels", a.labels,
                       declared_labels >= 0 ? declared_labels : static_cast<int64_t>(a.labels.size())));
  return up->Finish();
}

std::unique_ptr<DatasetUploads> OpenStore(const std::string& name, int64_t max_upload, int64_t quota) {
  DatasetUploadsOptions o;
  o.root = data::testing::TempPath(name);
  o.max_upload_bytes = max_upload;
  o.quota_bytes = quota;
  auto store = DatasetUploads::Open(o);
  EXPECT_TRUE(store.ok()) << store.status();
  return *std::move(store);
}

TEST(DatasetUploadsTest, StoresOncePerContentAndOwnsByUploader) {
  auto store = OpenStore("uploads_own", 1 << 20, 1 << 20);
  Arrays a;
  auto first = Upload(store.get(), User("alice"), a);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->train_examples(), 4);
  EXPECT_EQ(first->test_examples(), 0);
  EXPECT_EQ(first->bytes(), static_cast<int64_t>(a.images.size() + a.labels.size()));
  auto again = Upload(store.get(), User("alice"), a);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->dataset_id(), first->dataset_id());
  EXPECT_EQ(store->OwnerBytes("alice"), first->bytes());  // not counted twice
  EXPECT_EQ(DirEntries(store->root().path()), std::vector<std::string>{first->dataset_id()});

  EXPECT_TRUE(store->Authorize(User("alice"), first->dataset_id()).ok());
  EXPECT_TRUE(store->Authorize(User("root", /*admin=*/true), first->dataset_id()).ok());
  absl::Status bob = store->Authorize(User("bob"), first->dataset_id());
  EXPECT_EQ(bob.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(bob.message().find(first->dataset_id()), std::string::npos) << bob;
  EXPECT_EQ(store->Authorize(User("alice"), "../" + first->dataset_id()).code(), absl::StatusCode::kInvalidArgument);

  // Bob sends the same bytes: now he may use them too. A reopened store
  // remembers both owners.
  ASSERT_TRUE(Upload(store.get(), User("bob"), a).ok());
  EXPECT_TRUE(store->Authorize(User("bob"), first->dataset_id()).ok());
  auto reopened = OpenStore("uploads_own", 1 << 20, 1 << 20);
  EXPECT_TRUE(reopened->Authorize(User("bob"), first->dataset_id()).ok());
  EXPECT_TRUE(reopened->Authorize(User("alice"), first->dataset_id()).ok());
  EXPECT_EQ(reopened->OwnerBytes("alice"), first->bytes());
}

TEST(DatasetUploadsTest, LimitsAndBadInputLeaveNothing) {
  Arrays a;
  auto small = OpenStore("uploads_limit", 40, 1 << 20);
  auto over = Upload(small.get(), User("alice"), a);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("--max_upload_bytes"), std::string::npos) << over.status();
  EXPECT_NE(over.status().message().find("file train_labels"), std::string::npos) << over.status();
  EXPECT_TRUE(DirEntries(small->root().path()).empty());

  const int64_t one = static_cast<int64_t>(a.images.size() + a.labels.size());
  auto quota = OpenStore("uploads_quota", 1 << 20, one + 10);
  ASSERT_TRUE(Upload(quota.get(), User("alice"), a).ok());
  Arrays b;
  b.labels = IdxBytes({4}, {1, 1, 1, 1});
  auto second = Upload(quota.get(), User("alice"), b);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(second.status().message().find("--upload_quota_bytes"), std::string::npos) << second.status();
  EXPECT_TRUE(Upload(quota.get(), User("carol"), b).ok());  // per owner
  EXPECT_EQ(DirEntries(quota->root().path()).size(), 2u);

  auto mismatch = Upload(quota.get(), User("dave"), a, /*declared_labels=*/3);
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("train_labels"), std::string::npos) << mismatch.status();
  EXPECT_EQ(DirEntries(quota->root().path()).size(), 2u);
  EXPECT_EQ(quota->OwnerBytes("dave"), 0);
}

TEST(DatasetUploadsTest, PushCopiesToEveryTaskAndChecksTheBytes) {
  auto store = OpenStore("uploads_push", 1 << 20, 1 << 20);
  auto up = Upload(store.get(), User("alice"), Arrays());
  ASSERT_TRUE(up.ok());
  auto cache0 = worker::DatasetCache::Open(data::testing::TempPath("cache0"));
  auto cache1 = worker::DatasetCache::Open(data::testing::TempPath("cache1"));
  ASSERT_TRUE(cache0.ok() && cache1.ok());
  const std::vector<std::string> tasks = {"/job:worker/task:0", "/job:worker/task:1"};
  auto cluster = InProcessCluster::Create({tasks[0]}, worker::WorkerOptions{.datasets = cache0->get()});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE(PushDataset(*store, up->dataset_id(), (*cluster)->workers(), {tasks[0], tasks[0]}).ok());
  EXPECT_TRUE((*cache0)->Has(up->dataset_id()));
  EXPECT_EQ(DirEntries((*cache0)->root().path()), std::vector<std::string>{up->dataset_id()});
  // Again: already there.
  ASSERT_TRUE(PushDataset(*store, up->dataset_id(), (*cluster)->workers(), {tasks[0]}).ok());

  // Bytes that do not give the id are not kept.
  const std::string wrong(64, 'a');
  PutDatasetRequest first;
  first.set_dataset_id(wrong);
  auto* f = first.add_file();
  f->set_name("train_images");
  f->set_size(3);
  PutDatasetResponse r;
  ASSERT_TRUE((*cache1)->Put(first, &r).ok());
  EXPECT_FALSE(r.present());
  PutDatasetRequest chunk;
  chunk.set_dataset_id(wrong);
  chunk.set_data("abc");
  absl::Status s = (*cache1)->Put(chunk, &r);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(DirEntries((*cache1)->root().path()).empty());
  chunk.set_dataset_id("../x");
  EXPECT_EQ((*cache1)->Put(chunk, &r).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace master
}  // namespace weft
