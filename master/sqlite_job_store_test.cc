#include "master/sqlite_job_store.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "google/protobuf/util/message_differencer.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace weft {
namespace master {
namespace {

using google::protobuf::util::MessageDifferencer;

JobRecord Record(const std::string& id, JobState state, int64_t step = 0) {
  JobRecord r;
  r.spec.set_name(absl::StrCat("model of ", id));
  r.spec.set_batch_size(32);
  r.spec.set_epochs(3);
  r.status.set_job_id(id);
  r.status.set_name(r.spec.name());
  r.status.set_state(state);
  r.status.set_step(step);
  return r;
}

std::vector<std::string> Ids(const std::vector<JobRecord>& records) {
  std::vector<std::string> ids;
  for (const JobRecord& r : records) ids.push_back(r.status.job_id());
  return ids;
}

// Runs `sql` on the database at `path` through a connection of its own.
void RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK) << path;
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << sql << ": " << (err != nullptr ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

// "ok" for a sound database file.
std::string IntegrityCheck(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return "cannot open";
  }
  std::string result;
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &stmt, nullptr) == SQLITE_OK &&
      sqlite3_step(stmt) == SQLITE_ROW) {
    result = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
  } else {
    result = sqlite3_errmsg(db);
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return result;
}

class SqliteJobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = JoinPath(::testing::TempDir(), "sqlite_job_store_test.XXXXXX");
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }

  std::string Path(const std::string& name) const { return JoinPath(dir_, name); }

  std::unique_ptr<SqliteJobStore> OpenOrDie(const std::string& state_dir) {
    auto store = SqliteJobStore::Open(state_dir);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  std::string dir_;
};

TEST_F(SqliteJobStoreTest, RoundTripCreatesTheDirectory) {
  const std::string state_dir = Path("a/b/state");
  auto store = OpenOrDie(state_dir);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->path(), JoinPath(state_dir, "jobs.db"));
  EXPECT_TRUE(Env::Default()->FileExists(store->path()));
  // Job records are private to the master's user.
  struct stat st;
  ASSERT_EQ(stat(store->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(state_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  auto empty = store->LoadAll();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());

  const std::vector<JobRecord> put = {Record("job-1", SUCCEEDED, 100), Record("job-2", FAILED, 7),
                                      Record("job-3", RUNNING, 12)};
  const int64_t before_ms = absl::ToUnixMillis(absl::Now());
  for (const JobRecord& r : put) ASSERT_TRUE(store->Put(r).ok());
  const int64_t after_ms = absl::ToUnixMillis(absl::Now());
  auto got = store->LoadAll();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), put.size());
  for (size_t i = 0; i < put.size(); ++i) {
    // When it was stored: a restarted master dates its predecessor's stop by it.
    EXPECT_GE((*got)[i].updated_unix_ms, before_ms);
    EXPECT_LE((*got)[i].updated_unix_ms, after_ms);
    EXPECT_TRUE(MessageDifferencer::Equals((*got)[i].spec, put[i].spec)) << (*got)[i].spec.DebugString();
    EXPECT_TRUE(MessageDifferencer::Equals((*got)[i].status, put[i].status)) << (*got)[i].status.DebugString();
  }
}

TEST_F(SqliteJobStoreTest, UpsertKeepsTheFirstPutsOrder) {
  auto store = OpenOrDie(dir_);
  ASSERT_NE(store, nullptr);
  for (const char* id : {"job-c", "job-a", "job-b"}) ASSERT_TRUE(store->Put(Record(id, PENDING)).ok());
  ASSERT_TRUE(store->Put(Record("job-a", SUCCEEDED, 500)).ok());
  ASSERT_TRUE(store->Put(Record("job-c", RUNNING, 3)).ok());

  auto got = store->LoadAll();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Ids(*got), std::vector<std::string>({"job-c", "job-a", "job-b"}));
  EXPECT_EQ((*got)[0].status.state(), RUNNING);
  EXPECT_EQ((*got)[1].status.state(), SUCCEEDED);
  EXPECT_EQ((*got)[1].status.step(), 500);
  EXPECT_EQ((*got)[2].status.state(), PENDING);
}

TEST_F(SqliteJobStoreTest, ReopenFindsTheRecords) {
  {
    auto store = OpenOrDie(dir_);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Put(Record("job-1", SUCCEEDED)).ok());
    ASSERT_TRUE(store->Put(Record("job-2", RUNNING)).ok());
    ASSERT_TRUE(store->Close().ok());
    EXPECT_TRUE(store->Close().ok());  // idempotent
    const absl::Status closed = store->Put(Record("job-3", PENDING));
    EXPECT_EQ(closed.code(), absl::StatusCode::kFailedPrecondition) << closed;
    EXPECT_EQ(store->LoadAll().status().code(), absl::StatusCode::kFailedPrecondition);
  }
  {
    auto store = OpenOrDie(dir_);
    ASSERT_NE(store, nullptr);
    auto got = store->LoadAll();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(Ids(*got), std::vector<std::string>({"job-1", "job-2"}));
    // A new id goes after the reloaded ones; the destructor closes.
    ASSERT_TRUE(store->Put(Record("job-0", PENDING)).ok());
  }
  auto store = OpenOrDie(dir_);
  ASSERT_NE(store, nullptr);
  auto got = store->LoadAll();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Ids(*got), std::vector<std::string>({"job-1", "job-2", "job-0"}));
  EXPECT_EQ(IntegrityCheck(store->path()), "ok");
}

TEST_F(SqliteJobStoreTest, EmptyJobIdIsRefused) {
  auto store = OpenOrDie(dir_);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Put(Record("", PENDING)).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SqliteJobStoreTest, ConcurrentPuts) {
  auto store = OpenOrDie(dir_);
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 8;
  constexpr int kJobsPerThread = 25;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kJobsPerThread; ++i) {
        const std::string id = absl::StrCat("job-", t, "-", i);
        if (!store->Put(Record(id, PENDING)).ok()) ++failures[t];
        if (!store->Put(Record(id, SUCCEEDED, i)).ok()) ++failures[t];
        // Readers run alongside the writers.
        if (i % 5 == 0 && !store->LoadAll().ok()) ++failures[t];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures, std::vector<int>(kThreads, 0));

  auto got = store->LoadAll();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), static_cast<size_t>(kThreads * kJobsPerThread));
  // Each thread's jobs appear in the order it put them, each updated.
  std::vector<int> next(kThreads, 0);
  for (const JobRecord& r : *got) {
    int t = -1;
    int i = -1;
    ASSERT_EQ(std::sscanf(r.status.job_id().c_str(), "job-%d-%d", &t, &i), 2) << r.status.job_id();
    ASSERT_GE(t, 0);
    ASSERT_LT(t, kThreads);
    EXPECT_EQ(i, next[t]++) << r.status.job_id();
    EXPECT_EQ(r.status.state(), SUCCEEDED) << r.status.job_id();
    EXPECT_EQ(r.status.step(), i);
  }
}

TEST_F(SqliteJobStoreTest, GarbageFileIsAnErrorNamingThePath) {
  const std::string path = Path("jobs.db");
  std::string garbage(8192, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>((i * 131 + 7) % 251);
  const absl::string_view piece = garbage;
  ASSERT_TRUE(WriteFileAtomically(Env::Default(), path, {&piece, 1}).ok());

  auto store = SqliteJobStore::Open(dir_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_TRUE(absl::StrContains(store.status().message(), path)) << store.status();
  EXPECT_TRUE(absl::StrContains(store.status().message(), "sqlite3_")) << store.status();
}

TEST_F(SqliteJobStoreTest, UnparsableRecordIsDataLossNamingTheJob) {
  std::string path;
  {
    auto store = OpenOrDie(dir_);
    ASSERT_NE(store, nullptr);
    path = store->path();
    ASSERT_TRUE(store->Put(Record("job-1", SUCCEEDED)).ok());
    ASSERT_TRUE(store->Put(Record("job-2", SUCCEEDED)).ok());
  }
  // An unfinished varint: no JobStatus parses from it.
  RawExec(path, "UPDATE jobs SET status = X'FFFFFFFF' WHERE job_id = 'job-2'");

  auto store = OpenOrDie(dir_);
  ASSERT_NE(store, nullptr);
  auto got = store->LoadAll();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "job-2")) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), path)) << got.status();
  // The store still works.
  EXPECT_TRUE(store->Put(Record("job-2", FAILED)).ok());
  EXPECT_TRUE(store->LoadAll().ok());
}

TEST_F(SqliteJobStoreTest, NewerSchemaIsRefused) {
  std::string path;
  {
    auto store = OpenOrDie(dir_);
    ASSERT_NE(store, nullptr);
    path = store->path();
  }
  RawExec(path, absl::StrCat("PRAGMA user_version = ", SqliteJobStore::kSchemaVersion + 1));
  auto store = SqliteJobStore::Open(dir_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
  EXPECT_TRUE(absl::StrContains(store.status().message(), path)) << store.status();
}

TEST_F(SqliteJobStoreTest, StateDirUnderAFileIsAnErrorNamingThePath) {
  const std::string file = Path("file");
  const absl::string_view piece = "not a directory";
  ASSERT_TRUE(WriteFileAtomically(Env::Default(), file, {&piece, 1}).ok());
  const std::string state_dir = JoinPath(file, "state");
  auto store = SqliteJobStore::Open(state_dir);
  ASSERT_FALSE(store.ok());
  EXPECT_TRUE(absl::StrContains(store.status().message(), file)) << store.status();
}

// While alive, this thread obeys file permissions even as root: it drops the
// capabilities that bypass them (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH,
// CAP_FOWNER) from its effective set, and raises them again at the end.
// Capabilities belong to a thread, and the raw capset call changes only the
// calling one. A no-op for other users, who obey permissions anyway.
class ScopedObeyPermissions {
 public:
  ScopedObeyPermissions() {
    if (::geteuid() != 0) return;
    header_.version = _LINUX_CAPABILITY_VERSION_3;
    header_.pid = 0;  // this thread
    if (::syscall(SYS_capget, &header_, saved_) != 0) {
      error_ = absl::StrCat("capget: ", std::strerror(errno));
      return;
    }
    __user_cap_data_struct lowered[2] = {saved_[0], saved_[1]};
    for (int cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER}) lowered[cap / 32].effective &= ~(1u << (cap % 32));
    if (::syscall(SYS_capset, &header_, lowered) != 0) {
      error_ = absl::StrCat("capset: ", std::strerror(errno));
      return;
    }
    dropped_ = true;
  }
  ~ScopedObeyPermissions() {
    if (dropped_) ::syscall(SYS_capset, &header_, saved_);
  }
  // Empty, or why the capabilities could not be dropped.
  const std::string& error() const { return error_; }

 private:
  __user_cap_header_struct header_{};
  __user_cap_data_struct saved_[2]{};
  bool dropped_ = false;
  std::string error_;
};

// Runs as root too (as CI does): see ScopedObeyPermissions.
TEST_F(SqliteJobStoreTest, UnwritableStateDirIsAnErrorNamingThePath) {
  ScopedObeyPermissions obey;
  ASSERT_EQ(obey.error(), "");
  const std::string locked = Path("locked");
  ASSERT_EQ(::mkdir(locked.c_str(), 0500), 0);

  // The database cannot be created in it.
  auto store = SqliteJobStore::Open(locked);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kPermissionDenied) << store.status();
  EXPECT_TRUE(absl::StrContains(store.status().message(), JoinPath(locked, "jobs.db"))) << store.status();

  // Nor can a state directory below it.
  const std::string below = JoinPath(locked, "state");
  store = SqliteJobStore::Open(below);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kPermissionDenied) << store.status();
  EXPECT_TRUE(absl::StrContains(store.status().message(), below)) << store.status();
  ::chmod(locked.c_str(), 0700);

  // Nor can a database file that is read-only.
  const std::string read_only = Path("read_only");
  {
    auto made = OpenOrDie(read_only);
    ASSERT_NE(made, nullptr);
  }
  const std::string path = JoinPath(read_only, "jobs.db");
  ASSERT_EQ(::chmod(path.c_str(), 0400), 0);
  store = SqliteJobStore::Open(read_only);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kPermissionDenied) << store.status();
  EXPECT_TRUE(absl::StrContains(store.status().message(), path)) << store.status();
}

// Reads one int32 from `fd`; false at the end of the pipe.
bool ReadId(int fd, int32_t* id) {
  char* p = reinterpret_cast<char*>(id);
  size_t left = sizeof(*id);
  while (left > 0) {
    const ssize_t n = ::read(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

// A child puts jobs and reports each one whose Put returned; the parent kills
// it with SIGKILL mid-stream. Every reported job must be there, as reported.
TEST_F(SqliteJobStoreTest, PutThatReturnedSurvivesKill9) {
  constexpr int32_t kKillAfter = 200;
  // Bounds the child; it cannot get there, since a full pipe stops it
  // until the parent reads.
  constexpr int32_t kMaxPuts = 1000000;
  const std::string state_dir = Path("crash");
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: no gtest assertions, only exit codes.
    ::close(fds[0]);
    auto store = SqliteJobStore::Open(state_dir);
    if (!store.ok()) ::_exit(2);
    for (int32_t i = 0; i < kMaxPuts; ++i) {
      const std::string id = absl::StrCat("job-", i);
      if (!(*store)->Put(Record(id, PENDING)).ok()) ::_exit(3);
      if (!(*store)->Put(Record(id, RUNNING, i)).ok()) ::_exit(3);
      if (::write(fds[1], &i, sizeof(i)) != sizeof(i)) ::_exit(4);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::vector<int32_t> reported;
  int32_t id = 0;
  while (static_cast<int32_t>(reported.size()) < kKillAfter && ReadId(fds[0], &id)) reported.push_back(id);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  // What the child wrote before it died is still in the pipe.
  while (ReadId(fds[0], &id)) reported.push_back(id);
  ::close(fds[0]);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
      << "the child ended before the kill, exit status " << (WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
  ASSERT_GE(static_cast<int32_t>(reported.size()), kKillAfter);
  for (size_t i = 0; i < reported.size(); ++i) ASSERT_EQ(reported[i], static_cast<int32_t>(i));

  const std::string path = JoinPath(state_dir, "jobs.db");
  EXPECT_EQ(IntegrityCheck(path), "ok");
  auto store = OpenOrDie(state_dir);
  ASSERT_NE(store, nullptr);
  auto got = store->LoadAll();
  ASSERT_TRUE(got.ok()) << got.status();
  // Puts commit in order: the store holds job-0..job-N, where N is the last
  // reported job or the one after it (put, not yet reported).
  ASSERT_GE(got->size(), reported.size());
  ASSERT_LE(got->size(), reported.size() + 1);
  for (size_t i = 0; i < got->size(); ++i) {
    const JobStatus& status = (*got)[i].status;
    ASSERT_EQ(status.job_id(), absl::StrCat("job-", i));
    if (i < reported.size()) {
      EXPECT_EQ(status.state(), RUNNING) << status.job_id();
      EXPECT_EQ(status.step(), static_cast<int64_t>(i));
    }
  }
  // And the reopened store takes new records.
  EXPECT_TRUE(store->Put(Record("job-after", PENDING)).ok());
}

}  // namespace
}  // namespace master
}  // namespace weft
