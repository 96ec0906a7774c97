// The Checkpointer under a checkpoint root, against a fake task that writes
// the shards it is asked for: relative shard paths, the OWNER file, and the
// directories it refuses.
#include "master/checkpointer.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/confined_root.h"
#include "common/env.h"
#include "common/fault_injecting_env.h"
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
// RestoreShard only records the path. Each call can be made to fail, and a
// task can hold no variables (ListShards NOT_FOUND, as a task where the
// session has no graph) or misreport its shard's checksum.
class ShardWritingWorker final : public FakeWorker {
 public:
  ShardWritingWorker(std::string task, std::string root) : FakeWorker(std::move(task)), root_(std::move(root)) {}

  struct Faults {
    absl::Status list, save, restore;
    bool holds_nothing = false;
    bool wrong_crc = false;
  };
  void SetFaults(Faults f) {
    absl::MutexLock lock(&mu_);
    faults_ = std::move(f);
  }

  void ListShardsAsync(const ListShardsRequest*, ListShardsResponse* response, StatusCallback done) override {
    Faults f = faults();
    {
      absl::MutexLock lock(&mu_);
      ++lists_;
    }
    if (!f.list.ok()) return done(f.list);
    if (f.holds_nothing) return done(absl::NotFoundError(absl::StrCat("no graph of session ", kSession)));
    response->set_task(task());
    SessionVariables* s = response->add_session();
    s->set_session_handle(kSession);
    s->add_variable()->set_name("w");
    done(absl::OkStatus());
  }

  void SaveShardAsync(const SaveShardRequest* request, SaveShardResponse* response, StatusCallback done) override {
    const Faults f = faults();
    {
      absl::MutexLock lock(&mu_);
      saved_.push_back(request->path());
    }
    if (!f.save.ok()) return done(f.save);
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
      response->set_crc32c(f.wrong_crc ? info->crc32c ^ 1 : info->crc32c);
      response->set_num_variables(1);
    }
    done(info.status());
  }

  void RestoreShardAsync(const RestoreShardRequest* request, RestoreShardResponse* response,
                         StatusCallback done) override {
    const Faults f = faults();
    {
      absl::MutexLock lock(&mu_);
      restored_.push_back(request->path());
      restored_steps_.push_back(request->expect_global_step());
    }
    if (!f.restore.ok()) return done(f.restore);
    response->set_num_variables(1);
    done(absl::OkStatus());
  }

  int lists() const {
    absl::MutexLock lock(&mu_);
    return lists_;
  }
  std::vector<int64_t> restored_steps() const {
    absl::MutexLock lock(&mu_);
    return restored_steps_;
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
  Faults faults() const {
    absl::MutexLock lock(&mu_);
    return faults_;
  }

  const std::string root_;
  mutable absl::Mutex mu_;
  Faults faults_ ABSL_GUARDED_BY(mu_);
  int lists_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> saved_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> restored_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> restored_steps_ ABSL_GUARDED_BY(mu_);
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

// An Env whose clock the test sets; files go to the POSIX Env.
class ClockEnv final : public EnvWrapper {
 public:
  ClockEnv() : EnvWrapper(Env::Default()) {}
  void Advance(absl::Duration d) { now_micros_ += absl::ToInt64Microseconds(d); }
  int64_t NowMicros() override { return now_micros_; }

 private:
  std::atomic<int64_t> now_micros_{1700000000LL * 1000000};
};

constexpr char kPs1[] = "/job:ps/task:1";
constexpr char kWorker[] = "/job:worker/task:0";

// Checkpoints of a job without a root over two ps tasks and a worker that
// holds no variables; the master reaches the files through a
// FaultInjectingEnv.
class CheckpointerFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string templ = JoinPath(tmp != nullptr ? tmp : "/tmp", "checkpointer_fault_test.XXXXXX");
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = JoinPath(templ, "ck");
    auto cache = WorkerCache::CreateLocal({kPs, kPs1, kWorker}, [this](const std::string& task, const std::string&) {
      auto w = std::make_unique<ShardWritingWorker>(task, "/");
      tasks_[task] = w.get();
      return w;
    });
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = *std::move(cache);
    for (const char* t : {kPs, kPs1, kWorker}) ASSERT_NE(cache_->GetOrCreateWorker(t), nullptr);
    ShardWritingWorker::Faults none;
    none.holds_nothing = true;
    task(kWorker)->SetFaults(none);
  }

  std::unique_ptr<Checkpointer> Make(CheckpointPolicy policy, Env* env = nullptr) {
    if (policy.dir().empty()) policy.set_dir(dir_);
    auto ck = Checkpointer::Create(env != nullptr ? env : &env_, cache_.get(), "job", policy);
    EXPECT_TRUE(ck.ok()) << ck.status();
    return *std::move(ck);
  }
  std::unique_ptr<Checkpointer> Make() { return Make(CheckpointPolicy()); }
  ShardWritingWorker* task(const std::string& name) { return tasks_.at(name); }
  std::string StepDir(int64_t step) const { return JoinPath(dir_, ps::CheckpointDirName(step)); }
  std::vector<std::string> Listing() const {
    auto l = Env::Default()->ListDirectory(dir_);
    return l.ok() ? *l : std::vector<std::string>{};
  }

  std::string dir_;
  FaultInjectingEnv env_{Env::Default()};
  std::map<std::string, ShardWritingWorker*> tasks_;  // owned by cache_
  std::unique_ptr<WorkerCache> cache_;
};

TEST_F(CheckpointerFaultTest, SavesEveryTaskHoldingVariablesAndVouchesForThemLast) {
  auto ck = Make();
  absl::StatusOr<ps::CheckpointEntry> saved = ck->Save(kSession, 7);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->step, 7);
  EXPECT_EQ(saved->path, StepDir(7));
  ASSERT_EQ(saved->manifest.shard_size(), 2);  // the worker holds nothing
  EXPECT_EQ(saved->manifest.shard(0).owner_task(), kPs);
  EXPECT_EQ(saved->manifest.shard(0).file(), "ps-0.shard");
  EXPECT_EQ(saved->manifest.shard(1).owner_task(), kPs1);
  EXPECT_EQ(saved->manifest.shard(1).file(), "ps-1.shard");
  EXPECT_TRUE(task(kWorker)->saved().empty());
  auto read = ps::ReadManifest(Env::Default(), StepDir(7));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->step(), 7);

  // With holders, only they are asked: not even ListShards reaches the others.
  const int worker_lists = task(kWorker)->lists();
  saved = ck->Save(kSession, 8, {kPs1});
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_EQ(saved->manifest.shard_size(), 1);
  EXPECT_EQ(saved->manifest.shard(0).owner_task(), kPs1);
  EXPECT_EQ(task(kWorker)->lists(), worker_lists);
}

TEST_F(CheckpointerFaultTest, AShardThatFailsLeavesNoManifestAndRestoreTakesTheOlderOne) {
  auto ck = Make();
  ASSERT_TRUE(ck->Save(kSession, 10).ok());
  ShardWritingWorker::Faults f;
  f.save = absl::ResourceExhaustedError("write(/ck/step-000000000020/ps-1.shard): No space left on device");
  task(kPs1)->SetFaults(f);
  absl::StatusOr<ps::CheckpointEntry> saved = ck->Save(kSession, 20);
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kResourceExhausted) << saved.status();
  EXPECT_EQ(saved.status().message(),
            absl::StrCat("saving checkpoint ", StepDir(20), ": task /job:ps/task:1: write(/ck/step-000000000020/",
                         "ps-1.shard): No space left on device"));
  // ps 0 wrote its shard, but nothing vouches for it.
  EXPECT_TRUE(Env::Default()->FileExists(JoinPath(StepDir(20), "ps-0.shard")));
  EXPECT_FALSE(Env::Default()->FileExists(JoinPath(StepDir(20), "MANIFEST")));
  absl::StatusOr<ps::CheckpointEntry> found = ck->FindResumePoint();
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->step, 10);
}

TEST_F(CheckpointerFaultTest, ShardsTheMasterReadsDifferentlyAreNotVouchedFor) {
  auto ck = Make();
  ShardWritingWorker::Faults f;
  f.wrong_crc = true;  // as a task writing to a file system the master does not share
  task(kPs)->SetFaults(f);
  absl::StatusOr<ps::CheckpointEntry> saved = ck->Save(kSession, 3);
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kDataLoss) << saved.status();
  EXPECT_TRUE(absl::StrContains(saved.status().message(), "ps-0.shard")) << saved.status();
  EXPECT_FALSE(Env::Default()->FileExists(JoinPath(StepDir(3), "MANIFEST")));
  EXPECT_EQ(ck->FindResumePoint().status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CheckpointerFaultTest, AManifestThatCannotBeWrittenLeavesNoCheckpoint) {
  auto ck = Make();
  ASSERT_TRUE(ck->Save(kSession, 1).ok());
  FaultInjectingEnv::Faults f;
  f.rename_errno = EIO;
  env_.SetFaults(f);
  absl::StatusOr<ps::CheckpointEntry> saved = ck->Save(kSession, 2);
  EXPECT_FALSE(saved.ok());
  EXPECT_TRUE(absl::StrContains(saved.status().message(), "MANIFEST")) << saved.status();
  EXPECT_TRUE(absl::StrContains(saved.status().message(), "[injected]")) << saved.status();
  env_.ClearFaults();
  EXPECT_FALSE(Env::Default()->FileExists(JoinPath(StepDir(2), "MANIFEST")));
  absl::StatusOr<ps::CheckpointEntry> found = ck->FindResumePoint();
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->step, 1);
  // No manifest temp file is left for anything to mistake.
  absl::StatusOr<std::vector<std::string>> left = Env::Default()->ListDirectory(StepDir(2));
  ASSERT_TRUE(left.ok()) << left.status();
  for (const std::string& name : *left) EXPECT_TRUE(absl::EndsWith(name, ".shard")) << name;
}

TEST_F(CheckpointerFaultTest, ResavingAStepUnvouchesItBeforeReplacingItsShards) {
  auto ck = Make();
  ASSERT_TRUE(ck->Save(kSession, 4).ok());
  ASSERT_TRUE(ck->Save(kSession, 5).ok());
  // A later attempt saves step 5 again and fails half-way: the old manifest
  // must not vouch for a mix of old and new shards.
  ShardWritingWorker::Faults f;
  f.save = absl::UnavailableError("connection reset");
  task(kPs1)->SetFaults(f);
  EXPECT_FALSE(ck->Save(kSession, 5).ok());
  EXPECT_FALSE(Env::Default()->FileExists(JoinPath(StepDir(5), "MANIFEST")));
  absl::StatusOr<ps::CheckpointEntry> found = ck->FindResumePoint();
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->step, 4);
}

TEST_F(CheckpointerFaultTest, KeepsTheNewestCheckpointsOnly) {
  CheckpointPolicy keep2;
  keep2.set_keep(2);
  auto ck = Make(keep2);
  for (int64_t step : {10, 20, 30, 40}) ASSERT_TRUE(ck->Save(kSession, step).ok()) << step;
  EXPECT_EQ(Listing(), (std::vector<std::string>{ps::CheckpointDirName(30), ps::CheckpointDirName(40)}));

  // keep unset: 3.
  auto three = Make();
  ASSERT_TRUE(three->Save(kSession, 50).ok());
  ASSERT_TRUE(three->Save(kSession, 60).ok());
  EXPECT_EQ(Listing(), (std::vector<std::string>{ps::CheckpointDirName(40), ps::CheckpointDirName(50),
                                                 ps::CheckpointDirName(60)}));
}

// What an observer hears of saves, in order: "start <step> <tasks>",
// "done <task> <code>", "end <code>".
class RecordingObserver final : public StepObserver {
 public:
  void StepStarted(const StepInfo& step) override {
    Add(step.step_id, absl::StrCat("start ", step.checkpoint_step, " ", absl::StrJoin(*step.tasks, ",")));
  }
  void RunGraphDone(int64_t step_id, const std::string& task, absl::Duration, const absl::Status& s) override {
    Add(step_id, absl::StrCat("done ", task, " ", absl::StatusCodeToString(s.code())));
  }
  void StepEnded(int64_t step_id, const absl::Status& s) override {
    Add(step_id, absl::StrCat("end ", absl::StatusCodeToString(s.code())));
  }
  std::vector<std::string> heard() {
    absl::MutexLock lock(&mu_);
    return heard_;
  }
  std::set<int64_t> ids() {
    absl::MutexLock lock(&mu_);
    return ids_;
  }

 private:
  void Add(int64_t id, std::string what) {
    absl::MutexLock lock(&mu_);
    ids_.insert(id);
    heard_.push_back(std::move(what));
  }
  absl::Mutex mu_;
  std::vector<std::string> heard_ ABSL_GUARDED_BY(mu_);
  std::set<int64_t> ids_ ABSL_GUARDED_BY(mu_);
};

// A save is told to the step watch as a step of the tasks it asks, each done
// once it has saved its shard or holds none, so that a task that holds the
// save up is named (master/step_watch.h).
TEST_F(CheckpointerFaultTest, EachSaveIsToldToTheObserverAsAStepOfItsTasks) {
  RecordingObserver observer;
  CheckpointerOptions options;
  options.observer = &observer;
  CheckpointPolicy policy;
  policy.set_dir(dir_);
  auto ck = Checkpointer::Create(&env_, cache_.get(), "job", policy, options);
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_TRUE((*ck)->Save(kSession, 7).ok());
  std::vector<std::string> heard = observer.heard();
  ASSERT_EQ(heard.size(), 5u) << absl::StrJoin(heard, "\n");
  EXPECT_EQ(heard[0], absl::StrCat("start 7 ", absl::StrJoin(cache_->ListTasks(), ",")));
  // The worker holds nothing: done once listed, before any shard is saved.
  EXPECT_EQ(heard[1], absl::StrCat("done ", kWorker, " OK"));
  EXPECT_EQ(std::set<std::string>(heard.begin() + 2, heard.begin() + 4),
            (std::set<std::string>{absl::StrCat("done ", kPs, " OK"), absl::StrCat("done ", kPs1, " OK")}));
  EXPECT_EQ(heard[4], "end OK");

  ShardWritingWorker::Faults f;
  f.save = absl::UnavailableError("connection reset");
  task(kPs1)->SetFaults(f);
  ASSERT_FALSE((*ck)->Save(kSession, 8, {kPs, kPs1}).ok());
  heard = observer.heard();
  ASSERT_EQ(heard.size(), 9u) << absl::StrJoin(heard, "\n");
  EXPECT_EQ(heard[5], absl::StrCat("start 8 ", kPs, ",", kPs1));
  EXPECT_TRUE(heard[6] == absl::StrCat("done ", kPs1, " UNAVAILABLE") ||
              heard[7] == absl::StrCat("done ", kPs1, " UNAVAILABLE"))
      << absl::StrJoin(heard, "\n");
  EXPECT_EQ(heard[8], "end UNAVAILABLE");
  // No session step has a negative id: a save is never taken for one.
  EXPECT_EQ(observer.ids(), (std::set<int64_t>{-8, -9}));
}

TEST_F(CheckpointerFaultTest, TasksThatCannotListOrHoldNothing) {
  auto ck = Make();
  ShardWritingWorker::Faults f;
  f.list = absl::UnavailableError("connection refused");
  task(kPs1)->SetFaults(f);
  absl::StatusOr<ps::CheckpointEntry> saved = ck->Save(kSession, 1);
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kUnavailable) << saved.status();
  EXPECT_EQ(saved.status().message(), "task /job:ps/task:1: connection refused");
  EXPECT_TRUE(task(kPs)->saved().empty());  // nothing is saved before every task listed

  ShardWritingWorker::Faults nothing;
  nothing.holds_nothing = true;
  task(kPs)->SetFaults(nothing);
  task(kPs1)->SetFaults(nothing);
  saved = ck->Save(kSession, 1);
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kFailedPrecondition) << saved.status();
  EXPECT_EQ(saved.status().message(), "session s holds no variables on any task: nothing to checkpoint");
  EXPECT_FALSE(Env::Default()->FileExists(JoinPath(StepDir(1), "MANIFEST")));
}

TEST_F(CheckpointerFaultTest, RestoreSendsEachShardToItsOwnerAndNamesTheOneThatFails) {
  auto ck = Make();
  absl::StatusOr<ps::CheckpointEntry> saved = ck->Save(kSession, 12);
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_TRUE(ck->Restore(kSession, *saved).ok());
  EXPECT_EQ(task(kPs)->restored(), std::vector<std::string>{JoinPath(StepDir(12), "ps-0.shard")});
  EXPECT_EQ(task(kPs1)->restored(), std::vector<std::string>{JoinPath(StepDir(12), "ps-1.shard")});
  EXPECT_EQ(task(kPs1)->restored_steps(), std::vector<int64_t>{12});  // the task checks the step
  EXPECT_TRUE(task(kWorker)->restored().empty());

  ShardWritingWorker::Faults f;
  f.restore = absl::FailedPreconditionError("variable 'w' is float32[4,3] in the session, [2,3] in the shard");
  task(kPs1)->SetFaults(f);
  absl::Status s = ck->Restore(kSession, *saved);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(s.message(), absl::StrCat("restoring checkpoint ", StepDir(12),
                                      ": task /job:ps/task:1: variable 'w' is float32[4,3] in the session, [2,3] "
                                      "in the shard"));

  // A shard of a task the cluster no longer has.
  ps::CheckpointEntry foreign = *saved;
  foreign.manifest.mutable_shard(1)->set_owner_task("/job:ps/task:7");
  s = ck->Restore(kSession, foreign);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(s.message(), absl::StrCat("checkpoint ", StepDir(12),
                                      " has a shard of task /job:ps/task:7, which is not in the cluster"));
}

// An elastic mirrored job restores onto its members now, which need not be
// the tasks that saved: each holds a whole replica, so a member without a
// shard takes the first one, and a task that saved but is no member is not
// asked.
TEST_F(CheckpointerFaultTest, RestoreOntoReplicasGivesAMemberWithoutAShardTheFirstOne) {
  auto ck = Make();
  absl::StatusOr<ps::CheckpointEntry> saved = ck->Save(kSession, 12);
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_TRUE(ck->Restore(kSession, *saved, {kPs1, kWorker}).ok());
  EXPECT_TRUE(task(kPs)->restored().empty());
  EXPECT_EQ(task(kPs1)->restored(), std::vector<std::string>{JoinPath(StepDir(12), "ps-1.shard")});
  EXPECT_EQ(task(kWorker)->restored(), std::vector<std::string>{JoinPath(StepDir(12), "ps-0.shard")});
  EXPECT_EQ(task(kWorker)->restored_steps(), std::vector<int64_t>{12});

  ps::CheckpointEntry empty = *saved;
  empty.manifest.clear_shard();
  absl::Status s = ck->Restore(kSession, empty, {kWorker});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(s.message(), absl::StrCat("checkpoint ", StepDir(12), " has no shard"));
}

TEST_F(CheckpointerFaultTest, ResumesFromTheNewestValidCheckpointOfDirThenOfResumeFrom) {
  const std::string other = JoinPath(DirName(dir_), "other");
  CheckpointPolicy policy;
  policy.set_dir(other);
  auto previous = Make(policy);
  ASSERT_TRUE(previous->Save(kSession, 100).ok());

  policy.set_dir(dir_);
  policy.set_resume_from(other);
  auto ck = Make(policy);
  // Nothing in dir yet: the job starts from resume_from's newest.
  absl::StatusOr<ps::CheckpointEntry> found = ck->FindResumePoint();
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->step, 100);
  EXPECT_EQ(found->path, JoinPath(other, ps::CheckpointDirName(100)));

  // Its own checkpoints win, the newest valid one; a damaged newer one is
  // passed over.
  ASSERT_TRUE(ck->Save(kSession, 110).ok());
  ASSERT_TRUE(ck->Save(kSession, 120).ok());
  const absl::string_view torn = "torn";
  ASSERT_TRUE(WriteFileAtomically(Env::Default(), JoinPath(StepDir(120), "ps-1.shard"), {&torn, 1}).ok());
  found = ck->FindResumePoint();
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->step, 110);
  EXPECT_EQ(found->path, StepDir(110));

  // Neither directory has one: NOT_FOUND.
  CheckpointPolicy empty;
  empty.set_dir(JoinPath(DirName(dir_), "empty"));
  empty.set_resume_from(JoinPath(DirName(dir_), "empty-too"));
  EXPECT_EQ(Make(empty)->FindResumePoint().status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CheckpointerFaultTest, DueEveryStepsOrEverySecondsSinceTheLastSave) {
  CheckpointPolicy by_steps;
  by_steps.set_every_steps(5);
  auto steps = Make(by_steps);
  EXPECT_FALSE(steps->Due(4));
  EXPECT_TRUE(steps->Due(5));
  EXPECT_FALSE(steps->Due(6));
  EXPECT_TRUE(steps->Due(10));

  ClockEnv clock;
  CheckpointPolicy by_time;
  by_time.set_every_seconds(60);
  auto timed = Make(by_time, &clock);
  EXPECT_FALSE(timed->Due(1));
  clock.Advance(absl::Seconds(59));
  EXPECT_FALSE(timed->Due(2));
  clock.Advance(absl::Seconds(1));
  EXPECT_TRUE(timed->Due(3));
  // A save restarts the count.
  ASSERT_TRUE(timed->Save(kSession, 3).ok());
  EXPECT_FALSE(timed->Due(4));
  clock.Advance(absl::Seconds(60));
  EXPECT_TRUE(timed->Due(5));

  // Without a directory nothing is ever due.
  auto off = Checkpointer::Create(&clock, cache_.get(), "job", by_steps);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE((*off)->enabled());
  EXPECT_FALSE((*off)->Due(5));
  EXPECT_EQ((*off)->Save(kSession, 5).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace master
}  // namespace weft
