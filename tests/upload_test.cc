// A client's arrays uploaded to a real master (MasterService.UploadDataset)
// and trained on by a real two-worker cluster over mTLS: the master copies
// the dataset to each worker (WorkerService.PutDataset), which reads it as
// it reads IDX files under its data root, so the job trains exactly as the
// same job over those files does. Bad uploads are refused with codes and
// messages that name the file and the limit, and leave nothing behind; a
// user cannot train on another user's upload; only the master may put a
// dataset on a task.
#include <signal.h>
#include <sys/wait.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/grpc_client_auth.h"
#include "client/grpc_master_client.h"
#include "client/subprocess.h"
#include "common/grpc_util.h"
#include "gtest/gtest.h"
#include "job/job_spec.h"
#include "proto/master_service.grpc.pb.h"
#include "proto/worker_service.grpc.pb.h"
#include "runtime/data/test_files.h"
#include "tests/test_cluster.h"
#include "tests/test_tls.h"

namespace weft {
namespace {

using data::testing::ReadFile;
using data::testing::TempPath;

constexpr absl::Duration kJobDeadline = absl::Seconds(120);
constexpr int64_t kMaxUpload = 64 << 10;  // --max_upload_bytes
constexpr int64_t kQuota = 8 << 10;       // --upload_quota_bytes

// One file of an upload: its name, the size declared, the bytes sent.
struct File {
  std::string name;
  std::string bytes;
  int64_t declared = -1;  // -1: bytes.size()
};

class UploadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemons_ = new std::vector<std::unique_ptr<testing::TestDaemon>>();
    auto tls = testing::TestTls::Create(TempPath("tls"));
    ASSERT_TRUE(tls.ok()) << tls.status();
    tls_ = new testing::TestTls(*std::move(tls));
    testing::TestDaemon* w0 = Add("worker-0", {"worker", "--task=worker:0", "--dataset_cache=" + TempPath("cache-0")});
    testing::TestDaemon* w1 = Add("worker-1", {"worker", "--task=worker:1", "--dataset_cache=" + TempPath("cache-1")});
    for (auto& d : *daemons_) ASSERT_TRUE(d->Launch().ok());
    for (auto& d : *daemons_) {
      absl::Status s = d->AwaitPort();
      ASSERT_TRUE(s.ok()) << s;
    }
    worker0_ = w0->address();
    testing::TestDaemon* master =
        Add("master", {"master", absl::StrCat("--cluster=worker=", w0->address(), ",", w1->address()),
                       "--upload_root=" + TempPath("uploads"), absl::StrCat("--max_upload_bytes=", kMaxUpload),
                       absl::StrCat("--upload_quota_bytes=", kQuota)});
    absl::Status s = master->Start();
    ASSERT_TRUE(s.ok()) << s;
    master_ = master->address();
    auto admin = MasterClient::Create(master_, tls_->ClientOptions("root", Role::kAdmin));
    std::vector<testing::TestDaemon*> all;
    for (auto& d : *daemons_) all.push_back(d.get());
    ASSERT_TRUE(testing::WaitForCluster(admin.get(), 2, all));
  }

  static void TearDownTestSuite() {
    for (auto& d : *daemons_) testing::ExpectStopsOnSigterm(d.get());
    delete daemons_;
    delete tls_;
  }

  static testing::TestDaemon* Add(const std::string& name, std::vector<std::string> args) {
    for (const std::string& flag : tls_->DaemonFlags(testing::DaemonIdentity(name))) args.push_back(flag);
    args.push_back("--data_root=" + ::testing::TempDir());
    args.push_back("--checkpoint_root=" + ::testing::TempDir());
    daemons_->push_back(std::make_unique<testing::TestDaemon>(name, std::move(args), TempPath(name + ".log")));
    return daemons_->back().get();
  }

  static std::shared_ptr<grpc::ChannelCredentials> AsUser(const std::string& user) {
    auto files = tls_->User(user);
    EXPECT_TRUE(files.ok()) << files.status();
    ClientCredentialFiles c;
    c.ca = tls_->ca();
    c.cert = files->first;
    c.key = files->second;
    return *ClientChannelCredentials(c);
  }
  static std::unique_ptr<MasterClient> Client(const std::string& user) {
    MasterClientOptions o;
    o.credentials = AsUser(user);
    return MasterClient::Create(master_, o);
  }

  // Streams `files` as the Python client does: a header, then chunks.
  static grpc::Status Upload(const std::string& user, const std::vector<File>& files, UploadDatasetResponse* r) {
    auto stub = MasterService::NewStub(NewChannel(master_, AsUser(user)));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(30));
    auto writer = stub->UploadDataset(&ctx, r);
    for (const File& f : files) {
      UploadDatasetRequest header;
      header.mutable_file()->set_name(f.name);
      header.mutable_file()->set_size(f.declared >= 0 ? f.declared : static_cast<int64_t>(f.bytes.size()));
      if (!writer->Write(header)) break;
      for (size_t i = 0; i < f.bytes.size(); i += 1000) {
        UploadDatasetRequest chunk;
        chunk.set_data(f.bytes.substr(i, 1000));
        if (!writer->Write(chunk)) break;
      }
    }
    writer->WritesDone();
    return writer->Finish();
  }

  // The four files of WriteThreeClassData under `dir`.
  static std::vector<File> DataFiles(const std::string& dir) {
    return {{"train_images", ReadFile(dir + "/train-images-idx3-ubyte.gz")},
            {"train_labels", ReadFile(dir + "/train-labels-idx1-ubyte.gz")},
            {"test_images", ReadFile(dir + "/t10k-images-idx3-ubyte.gz")},
            {"test_labels", ReadFile(dir + "/t10k-labels-idx1-ubyte.gz")}};
  }

  static JobSpec Job(const DatasetSpec& data) {
    auto job = ParseJob(R"(name: "uploaded"
        model { input_shape: [12] num_classes: 3 layer { dense { units: 16 activation: RELU } } layer { dense { units: 3 } } }
        optimizer { sgd { learning_rate: 0.1 } } batch_size: 8 seed: 3 epochs: 4
        strategy { kind: MULTI_WORKER_MIRRORED })",
                        "test");
    EXPECT_TRUE(job.ok()) << job.status();
    *job->mutable_dataset() = data;
    return *job;
  }

  static void ExpectNothingLeft() {
    for (const std::string& e : data::testing::DirEntries(TempPath("uploads"))) {
      EXPECT_FALSE(absl::StartsWith(e, ".tmp")) << "a failed upload left " << e;
    }
  }

  static testing::TestTls* tls_;
  static std::string master_, worker0_;
  static std::vector<std::unique_ptr<testing::TestDaemon>>* daemons_;
};

testing::TestTls* UploadTest::tls_ = nullptr;
std::string UploadTest::master_, UploadTest::worker0_;
std::vector<std::unique_ptr<testing::TestDaemon>>* UploadTest::daemons_ = nullptr;

TEST_F(UploadTest, AnUploadTrainsExactlyLikeTheSameFiles) {
  const std::string dir = testing::WriteThreeClassData(TempPath("data_upload"), 96);
  UploadDatasetResponse up;
  grpc::Status s = Upload("alice", DataFiles(dir), &up);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(up.dataset_id().size(), 64u);
  EXPECT_EQ(up.train_examples(), 96);
  EXPECT_EQ(up.test_examples(), 96);

  auto alice = Client("alice");
  DatasetSpec from_upload;
  from_upload.set_upload_id(up.dataset_id());
  DatasetSpec from_files;
  from_files.set_dir(dir);
  JobStatus results[2];
  for (int i = 0; i < 2; ++i) {
    auto id = alice->SubmitJob(Job(i == 0 ? from_upload : from_files));
    ASSERT_TRUE(id.ok()) << id.status();
    results[i] = testing::WatchJobToEnd(alice.get(), *id, kJobDeadline);
    ASSERT_EQ(results[i].state(), SUCCEEDED) << results[i].error();
  }
  EXPECT_GT(results[0].test_accuracy(), 0.9) << results[0].DebugString();  // chance is 1/3
  EXPECT_EQ(results[0].step(), results[1].step());
  EXPECT_DOUBLE_EQ(results[0].train_loss(), results[1].train_loss());
  EXPECT_DOUBLE_EQ(results[0].test_loss(), results[1].test_loss());
  EXPECT_DOUBLE_EQ(results[0].test_accuracy(), results[1].test_accuracy());
  // Each worker holds its own verified copy.
  for (const char* cache : {"cache-0", "cache-1"}) {
    EXPECT_EQ(data::testing::DirEntries(TempPath(cache)), std::vector<std::string>{up.dataset_id()}) << cache;
  }
  // The same arrays again: the same id, nothing new stored.
  UploadDatasetResponse again;
  ASSERT_TRUE(Upload("alice", DataFiles(dir), &again).ok());
  EXPECT_EQ(again.dataset_id(), up.dataset_id());

  // Bob may not train on it (nor learn anything else about it).
  auto bob = Client("bob");
  auto refused = bob->SubmitJob(Job(from_upload));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), up.dataset_id())) << refused.status();
  DatasetSpec pathlike;
  pathlike.set_upload_id("../../etc");
  auto bad = alice->SubmitJob(Job(pathlike));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "is not a dataset id")) << bad.status();
}

TEST_F(UploadTest, BadUploadsAreRefusedNamingTheFileAndLeaveNothing) {
  using data::testing::IdxBytes;
  const std::string images = IdxBytes({3, 2, 2}, std::vector<uint8_t>(12, 5));
  const std::string labels = IdxBytes({3}, {0, 1, 2});
  struct Case {
    std::string what;
    std::vector<File> files;
    grpc::StatusCode code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"size mismatch", {{"train_images", images, static_cast<int64_t>(images.size()) + 5}, {"train_labels", labels}},
       grpc::StatusCode::INVALID_ARGUMENT, "train_images"},
      {"oversize", {{"train_images", "", kMaxUpload + 1}}, grpc::StatusCode::RESOURCE_EXHAUSTED, "--max_upload_bytes"},
      {"unknown name", {{"../passwd", labels}}, grpc::StatusCode::INVALID_ARGUMENT, "unknown file"},
      {"duplicate", {{"train_labels", labels}, {"train_labels", labels}}, grpc::StatusCode::INVALID_ARGUMENT,
       "sent twice"},
      {"bad idx", {{"train_images", "not an IDX file at all"}, {"train_labels", labels}},
       grpc::StatusCode::INVALID_ARGUMENT, "file train_images"},
      {"count mismatch", {{"train_images", images}, {"train_labels", IdxBytes({2}, {0, 1})}},
       grpc::StatusCode::INVALID_ARGUMENT, "holds 3 examples but train_labels holds 2"},
      {"quota", {{"train_images", std::string(kQuota + 1, 'x')}}, grpc::StatusCode::RESOURCE_EXHAUSTED,
       "--upload_quota_bytes"},
  };
  for (const Case& c : cases) {
    UploadDatasetResponse r;
    grpc::Status s = Upload("carol", c.files, &r);
    EXPECT_EQ(s.error_code(), c.code) << c.what << ": " << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), c.says)) << c.what << ": " << s.error_message();
  }
  // The master keeps serving, and a good upload still works.
  UploadDatasetResponse ok;
  grpc::Status s = Upload("carol", {{"train_images", images}, {"train_labels", labels}}, &ok);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(ok.train_examples(), 3);
  ExpectNothingLeft();
}

TEST_F(UploadTest, OnlyTheMasterPutsADatasetOnATask) {
  for (auto creds : {AsUser("alice"), tls_->DaemonCredentials("/job:worker/task:1", tls_->ca())}) {
    auto stub = WorkerService::NewStub(NewChannel(worker0_, creds));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    PutDatasetRequest req;
    req.set_dataset_id(std::string(64, 'a'));
    req.add_file()->set_name("train_images");
    PutDatasetResponse resp;
    grpc::Status s = stub->PutDataset(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "WorkerService.PutDataset")) << s.error_message();
  }
  EXPECT_TRUE(data::testing::DirEntries(TempPath("cache-0")).size() <= 1u);
}

}  // namespace
}  // namespace weft
