// The Checkpointer under a checkpoint root, against a fake task that writes
// the shards it is asked for: relative shard paths, the OWNER file, and the
// directories it refuses.
#include "master/checkpointer.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/confined_root.h"
#include "common/env.h"
#include "gtest/gtest.h"
#include "master/fake_worker.h"
#include "ps/checkpoint_index.h"
#include "ps/manifest.h"
#include "ps/shard_file.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace master {
namespace {

constexpr char kPs[] = "/job:ps/task:0";
constexpr char kSession[] = "s";

// A ps task holding one variable of kSession. SaveShard writes a real shard
// file at the path it is given, taken relative to `root` unless absolute (it
// checks nothing: the real task's checks are ps/ps_service_test.cc's);
// RestoreShard only records the path.
class ShardWritingWorker final : public FakeWorker {
 public:
  ShardWritingWorker(std::string task, std::string root) : FakeWorker(std::move(task)), root_(std::move(root)) {}

  void ListShardsAsync(const ListShardsRequest*, ListShardsResponse* response, StatusCallback done) override {
    response->set_task(task());
    SessionVariables* s = response->add_session();
    s->set_session_handle(kSession);
    s->add_variable()->set_name("w");
    done(absl::OkStatus());
  }

  void SaveShardAsync(const SaveShardRequest* request, SaveShardResponse* response, StatusCallback done) override {
    {
      absl::MutexLock lock(&mu_);
      saved_.push_back(request->path());
    }
    const std::string path = request->path()[0] == '/' ? request->path() : JoinPath(root_, request->path());
    ps::Shard shard;
    shard.owner_task = task();
    shard.global_step = request->global_step();
    shard.tensors.push_back({"w", weft::testing::FloatTensor({2}, {1, 2}), "/job:ps/task:0/device:CPU:0"});
    absl::Status s = Env::Default()->CreateDirs(DirName(path));
    absl::StatusOr<ps::ShardFileInfo> info = s.ok() ? ps::WriteShard(Env::Default(), path, shard) : s;
    if (info.ok()) {
      response->set_path(request->path());
      response->set_size(info->size);
      response->set_crc32c(info->crc32c);
      response->set_num_variables(1);
    }
    done(info.status());
  }

  void RestoreShardAsync(const RestoreShardRequest* request, RestoreShardResponse* response,
                         StatusCallback done) override {
    {
      absl::MutexLock lock(&mu_);
      restored_.push_back(request->path());
    }
    response->set_num_variables(1);
    done(absl::OkStatus());
  }

  std::vector<std::string> saved() const {
    absl::MutexLock lock(&mu_);
    return saved_;
  }
  std::vector<std::string> restored() const {
    absl::MutexLock lock(&mu_);
    return restored_;
  }

 private:
  const std::string root_;
  mutable absl::Mutex mu_;
  std::vector<std::string> saved_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> restored_ ABSL_GUARDED_BY(mu_);
};

int Mode(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return static_cast<int>(st.st_mode & 07777);
}

class CheckpointerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string templ = JoinPath(tmp != nullptr ? tmp : "/tmp", "checkpointer_test.XXXXXX");
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    auto root = ConfinedRoot::Open(JoinPath(dir_, "root"));
    ASSERT_TRUE(root.ok()) << root.status();
    root_ = *std::move(root);
    outside_ = JoinPath(dir_, "outside");
    ASSERT_EQ(::mkdir(outside_.c_str(), 0700), 0);
    auto cache = WorkerCache::CreateLocal({kPs}, [this](const std::string& task, const std::string&) {
      auto w = std::make_unique<ShardWritingWorker>(task, root_->path());
      ps_ = w.get();
      return w;
    });
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = *std::move(cache);
    ASSERT_NE(cache_->GetOrCreateWorker(kPs), nullptr);
  }

  absl::StatusOr<std::unique_ptr<Checkpointer>> Make(const std::string& dir, const std::string& owner,
                                                     const std::string& resume_from = "", bool confined = true) {
    CheckpointPolicy policy;
    policy.set_dir(dir);
    policy.set_resume_from(resume_from);
    CheckpointerOptions options;
    if (confined) options.root = root_;
    options.owner = owner;
    return Checkpointer::Create(Env::Default(), cache_.get(), "job", policy, std::move(options));
  }

  std::string Under(const std::string& relative) const { return JoinPath(root_->path(), relative); }

  std::string dir_;
  std::string outside_;
  std::optional<ConfinedRoot> root_;
  std::unique_ptr<WorkerCache> cache_;
  ShardWritingWorker* ps_ = nullptr;  // owned by cache_
};

TEST_F(CheckpointerTest, SavesUnderTheRootThroughRelativeShardPathsAndClaimsTheDirectory) {
  auto ck = Make("jobs/a", "alice");
  ASSERT_TRUE(ck.ok()) << ck.status();
  absl::StatusOr<ps::CheckpointEntry> saved = (*ck)->Save(kSession, 1);
  ASSERT_TRUE(saved.ok()) << saved.status();
  // The task is sent a path relative to the root; the master's is absolute.
  EXPECT_EQ(ps_->saved(), std::vector<std::string>{"jobs/a/step-000000000001/ps-0.shard"});
  EXPECT_EQ(saved->path, Under("jobs/a/step-000000000001"));
  EXPECT_TRUE(Env::Default()->FileExists(Under("jobs/a/step-000000000001/MANIFEST")));
  // Private directories, and the owner's name in a private OWNER file.
  EXPECT_EQ(Mode(Under("jobs")), 0700);
  EXPECT_EQ(Mode(Under("jobs/a")), 0700);
  EXPECT_EQ(Mode(Under("jobs/a/step-000000000001")), 0700);
  EXPECT_EQ(ReadFileToString(Env::Default(), Under("jobs/a/OWNER")).value(), "alice\n");
  EXPECT_EQ(Mode(Under("jobs/a/OWNER")), 0600);
  EXPECT_EQ(ReadCheckpointOwner(*root_, "jobs/a").value(), std::optional<std::string>("alice"));
  // No temp file of the OWNER is left behind.
  EXPECT_EQ(Env::Default()->ListDirectory(Under("jobs/a")).value(),
            (std::vector<std::string>{"OWNER", "step-000000000001"}));

  // Resuming finds it and sends relative paths too.
  absl::StatusOr<ps::CheckpointEntry> found = (*ck)->FindResumePoint();
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->step, 1);
  EXPECT_EQ(found->path, Under("jobs/a/step-000000000001"));
  ASSERT_TRUE((*ck)->Restore(kSession, *found).ok());
  EXPECT_EQ(ps_->restored(), std::vector<std::string>{"jobs/a/step-000000000001/ps-0.shard"});

  // The same directory named by its absolute path inside the root.
  auto absolute = Make(Under("jobs/a"), "alice");
  ASSERT_TRUE(absolute.ok()) << absolute.status();
  saved = (*absolute)->Save(kSession, 2);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(ps_->saved().back(), "jobs/a/step-000000000002/ps-0.shard");
  EXPECT_EQ(ReadFileToString(Env::Default(), Under("jobs/a/OWNER")).value(), "alice\n");
}

TEST_F(CheckpointerTest, AnotherUsersDirectoryCannotBeSavedIntoPrunedOrResumedFrom) {
  auto alice = Make("shared", "alice");
  ASSERT_TRUE(alice.ok()) << alice.status();
  ASSERT_TRUE((*alice)->Save(kSession, 1).ok());
  const size_t saves = ps_->saved().size();

  for (const std::string& user : {std::string("bob"), std::string("")}) {
    SCOPED_TRACE(user.empty() ? "insecure" : user);
    auto other = Make("shared", user);
    ASSERT_TRUE(other.ok()) << other.status();
    absl::StatusOr<ps::CheckpointEntry> saved = (*other)->Save(kSession, 2);
    EXPECT_EQ(saved.status().code(), absl::StatusCode::kPermissionDenied) << saved.status();
    EXPECT_TRUE(absl::StrContains(saved.status().message(),
                                  absl::StrCat("checkpoint directory ", Under("shared"), " belongs to user alice")))
        << saved.status();
    absl::StatusOr<ps::CheckpointEntry> found = (*other)->FindResumePoint();
    EXPECT_EQ(found.status().code(), absl::StatusCode::kPermissionDenied) << found.status();
    // Nor as the checkpoint to start from.
    auto from = Make(absl::StrCat("own-", user), user, "shared");
    ASSERT_TRUE(from.ok()) << from.status();
    found = (*from)->FindResumePoint();
    EXPECT_EQ(found.status().code(), absl::StatusCode::kPermissionDenied) << found.status();
    EXPECT_TRUE(absl::StrContains(found.status().message(), "checkpoint.resume_from")) << found.status();
  }
  // Nothing was written, asked of the task, or pruned; the OWNER stands.
  EXPECT_EQ(ps_->saved().size(), saves);
  EXPECT_FALSE(Env::Default()->FileExists(Under("shared/step-000000000002")));
  EXPECT_TRUE(Env::Default()->FileExists(Under("shared/step-000000000001/MANIFEST")));
  EXPECT_EQ(ReadFileToString(Env::Default(), Under("shared/OWNER")).value(), "alice\n");
  // The owner resumes from it, as dir and as resume_from.
  auto from = Make("alices-next", "alice", "shared");
  ASSERT_TRUE(from.ok()) << from.status();
  absl::StatusOr<ps::CheckpointEntry> found = (*from)->FindResumePoint();
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->step, 1);
}

TEST_F(CheckpointerTest, DirectoriesOutsideTheRootAreRefused) {
  auto ck = Make("/etc/x", "alice");
  EXPECT_EQ(ck.status().code(), absl::StatusCode::kInvalidArgument) << ck.status();
  EXPECT_EQ(ck.status().message(),
            absl::StrCat("job: checkpoint.dir '/etc/x' is outside the checkpoint root ", root_->path()));
  for (const std::string& bad : {std::string("../outside"), std::string("a/../../outside"), root_->path()}) {
    ck = Make("mine", "alice", bad);
    EXPECT_EQ(ck.status().code(), absl::StatusCode::kInvalidArgument) << bad << ": " << ck.status();
    EXPECT_TRUE(absl::StrContains(ck.status().message(), "checkpoint.resume_from")) << ck.status();
  }
  EXPECT_TRUE(Env::Default()->ListDirectory(outside_).value().empty());
}

TEST_F(CheckpointerTest, SymbolicLinksUnderTheRootAreNotFollowed) {
  ASSERT_EQ(::symlink(outside_.c_str(), Under("link").c_str()), 0);
  auto ck = Make("link/job", "alice");
  ASSERT_TRUE(ck.ok()) << ck.status();  // lexically inside
  absl::StatusOr<ps::CheckpointEntry> saved = (*ck)->Save(kSession, 1);
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kPermissionDenied) << saved.status();
  EXPECT_TRUE(absl::StrContains(saved.status().message(), "symbolic link")) << saved.status();
  EXPECT_TRUE(ps_->saved().empty());
  EXPECT_TRUE(Env::Default()->ListDirectory(outside_).value().empty());
  EXPECT_EQ((*ck)->FindResumePoint().status().code(), absl::StatusCode::kPermissionDenied);
}

// In-process tests build checkpointers without a root: absolute paths as
// given, and no OWNER file.
TEST_F(CheckpointerTest, WithoutARootPathsAreAbsoluteAsGiven) {
  const std::string dir = JoinPath(dir_, "legacy");
  auto ck = Make(dir, "alice", "", /*confined=*/false);
  ASSERT_TRUE(ck.ok()) << ck.status();
  absl::StatusOr<ps::CheckpointEntry> saved = (*ck)->Save(kSession, 3);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(ps_->saved(), std::vector<std::string>{JoinPath(dir, "step-000000000003/ps-0.shard")});
  EXPECT_EQ(saved->path, JoinPath(dir, "step-000000000003"));
  EXPECT_FALSE(Env::Default()->FileExists(JoinPath(dir, "OWNER")));
  ASSERT_TRUE((*ck)->Restore(kSession, *saved).ok());
  EXPECT_EQ(ps_->restored(), std::vector<std::string>{JoinPath(dir, "step-000000000003/ps-0.shard")});
}

}  // namespace
}  // namespace master
}  // namespace weft
