// SqliteJobStore: the master's job records in a SQLite database, so that a
// restarted master (`weft master --state_dir=DIR`) knows its jobs.
//
// The database is `<state_dir>/jobs.db`, one row per job: the id, the order
// of its first Put, the serialized JobSpec and JobStatus, and when it was
// last written. Its schema version is SQLite's `user_version`; a database
// written by a newer weft is refused with FAILED_PRECONDITION rather than
// misread.
//
// Durability: the database runs in WAL mode with `synchronous=FULL`, and each
// Put is one transaction. A Put that returned OK survives the process being
// killed at any point (kill -9) and, as far as the disk honours fsync, a
// crash of the machine; a Put that failed or was cut short leaves the
// previous record, never a torn one.
//
// Errors name the database path and the failing SQLite call with SQLite's
// message. Codes: UNAVAILABLE when another process holds the database past
// the busy timeout (retry); DATA_LOSS for a database or a record that cannot
// be read (LoadAll names the job); PERMISSION_DENIED when the directory or
// file cannot be written; FAILED_PRECONDITION after Close.
//
// SQLite does its own file I/O; only the state directory is made through
// Env.
//
// Thread-safety: thread-safe. One connection, guarded by a mutex, serves
// every caller. Two processes may open the same database (SQLite locks it),
// but a state directory is meant for one master at a time.
#ifndef WEFT_MASTER_SQLITE_JOB_STORE_H_
#define WEFT_MASTER_SQLITE_JOB_STORE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "master/job_store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace weft {
namespace master {

class SqliteJobStore final : public JobStoreInterface {
 public:
  // The schema this build reads and writes.
  static constexpr int kSchemaVersion = 1;
  // The database's file name inside the state directory.
  static constexpr char kFileName[] = "jobs.db";

  // Creates `state_dir` (and its parents) when missing, opens or creates
  // `<state_dir>/jobs.db` and its schema.
  static absl::StatusOr<std::unique_ptr<SqliteJobStore>> Open(const std::string& state_dir);

  // Close(), ignoring its error.
  ~SqliteJobStore() override;
  SqliteJobStore(const SqliteJobStore&) = delete;
  SqliteJobStore& operator=(const SqliteJobStore&) = delete;

  // Upserts by record.status.job_id; a new id goes after every other, a known
  // one keeps its place. INVALID_ARGUMENT for an empty job id.
  absl::Status Put(const JobRecord& record) override;
  // Every record, in the order first Put.
  absl::StatusOr<std::vector<JobRecord>> LoadAll() const override;

  // Releases the connection; later calls answer FAILED_PRECONDITION.
  // Idempotent.
  absl::Status Close();

  // `<state_dir>/jobs.db`.
  const std::string& path() const { return path_; }

 private:
  struct StatementDeleter {
    void operator()(sqlite3_stmt* stmt) const;
  };
  using Statement = std::unique_ptr<sqlite3_stmt, StatementDeleter>;

  explicit SqliteJobStore(std::string path) : path_(std::move(path)) {}

  // Opens path_, sets it up and prepares the statements; on error the
  // caller destroys the store.
  absl::Status InitLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // UpgradeSchemaLocked in one transaction.
  absl::Status CreateSchemaLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Refuses a newer schema version; creates the schema in a database
  // without one.
  absl::Status UpgradeSchemaLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PrepareLocked(const char* sql, Statement* stmt) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `sql` to its end; the first column of its first row, if any, goes
  // to `first` (may be null).
  absl::Status ExecLocked(const char* sql, std::string* first = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A status for the SQLite result `rc` of `call`, naming path_ and carrying
  // the connection's message.
  absl::Status ErrorLocked(int rc, const std::string& call) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckOpenLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  mutable absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Kept prepared for the store's life; finalized before db_ is closed.
  Statement upsert_ ABSL_GUARDED_BY(mu_);
  Statement select_all_ ABSL_GUARDED_BY(mu_);
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_SQLITE_JOB_STORE_H_
