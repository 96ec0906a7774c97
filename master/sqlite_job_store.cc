#include "master/sqlite_job_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <sqlite3.h>

#include <cerrno>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace weft {
namespace master {
namespace {

// How long a call waits for another connection's lock before UNAVAILABLE.
constexpr int kBusyTimeoutMs = 5000;

constexpr char kCreateTable[] =
    "CREATE TABLE IF NOT EXISTS jobs ("
    "  job_id TEXT PRIMARY KEY NOT NULL,"
    "  seq INTEGER NOT NULL,"
    "  spec BLOB NOT NULL,"
    "  status BLOB NOT NULL,"
    "  updated_unix_ms INTEGER NOT NULL)";
constexpr char kCreateSeqIndex[] = "CREATE UNIQUE INDEX IF NOT EXISTS jobs_by_seq ON jobs (seq)";

// A new id takes the next seq; a known one keeps its own. The statement runs
// under SQLite's write lock, so two writers cannot pick the same seq.
constexpr char kUpsert[] =
    "INSERT INTO jobs (job_id, seq, spec, status, updated_unix_ms) "
    "VALUES (?1, (SELECT IFNULL(MAX(seq), 0) + 1 FROM jobs), ?2, ?3, ?4) "
    "ON CONFLICT (job_id) DO UPDATE SET "
    "spec = excluded.spec, status = excluded.status, updated_unix_ms = excluded.updated_unix_ms";
constexpr char kSelectAll[] = "SELECT job_id, spec, status, updated_unix_ms FROM jobs ORDER BY seq";

// Codes for what the caller should do; see the header.
absl::StatusCode CodeOf(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::StatusCode::kUnavailable;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::StatusCode::kDataLoss;
    case SQLITE_FULL:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_AUTH:
      return absl::StatusCode::kPermissionDenied;
    case SQLITE_CANTOPEN:
      return absl::StatusCode::kFailedPrecondition;
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

// Leaves a kept statement ready for its next use, whatever happened.
class ResetOnExit {
 public:
  explicit ResetOnExit(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~ResetOnExit() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  ResetOnExit(const ResetOnExit&) = delete;
  ResetOnExit& operator=(const ResetOnExit&) = delete;

 private:
  sqlite3_stmt* const stmt_;
};

// Column `i` of the current row as bytes (empty for NULL).
std::string ColumnBytes(sqlite3_stmt* stmt, int i) {
  const void* data = sqlite3_column_blob(stmt, i);  // before column_bytes, as SQLite asks
  const int n = sqlite3_column_bytes(stmt, i);
  return data == nullptr ? std::string() : std::string(static_cast<const char*>(data), n);
}

}  // namespace

void SqliteJobStore::StatementDeleter::operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }

absl::StatusOr<std::unique_ptr<SqliteJobStore>> SqliteJobStore::Open(const std::string& state_dir) {
  if (state_dir.empty()) return absl::InvalidArgumentError("the job store needs a state directory");
  RETURN_IF_ERROR(Annotate(Env::Default()->CreateDirs(state_dir), absl::StrCat("job store in ", state_dir)));
  std::unique_ptr<SqliteJobStore> store(new SqliteJobStore(JoinPath(state_dir, kFileName)));
  absl::Status s;
  {
    absl::MutexLock lock(&store->mu_);
    s = store->InitLocked();
  }
  if (!s.ok()) return s;  // the destructor closes what was opened
  return store;
}

SqliteJobStore::~SqliteJobStore() { Close().IgnoreError(); }

absl::Status SqliteJobStore::InitLocked() {
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  // Job records are private: create the file 0600 before SQLite does (its
  // journal takes the database file's mode).
  const int created = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  const int open_errno = created >= 0 ? 0 : errno;
  if (created >= 0) ::close(created);
  const int rc = sqlite3_open_v2(path_.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    // SQLite's errno here is from its read-only retry, so say why ourselves,
    // from our own open with this thread's effective permissions (access(2)
    // would judge by the real user, for whom root passes).
    const std::string dir = DirName(path_);
    if ((rc & 0xff) == SQLITE_CANTOPEN && (open_errno == EACCES || open_errno == EPERM || open_errno == EROFS)) {
      return absl::ErrnoToStatus(open_errno, absl::StrCat("job store ", path_, ": sqlite3_open_v2: directory ", dir,
                                                          " is not writable"));
    }
    return ErrorLocked(rc, "sqlite3_open_v2");
  }
  if (sqlite3_db_readonly(db_, "main") == 1) {
    return absl::PermissionDeniedError(
        absl::StrCat("job store ", path_, ": sqlite3_open_v2: the file is read-only for this process"));
  }
  sqlite3_extended_result_codes(db_, 1);
  const int busy = sqlite3_busy_timeout(db_, kBusyTimeoutMs);
  if (busy != SQLITE_OK) return ErrorLocked(busy, "sqlite3_busy_timeout");

  // The first statement reads the file: a file that is not a database fails
  // here, with DATA_LOSS.
  std::string mode;
  RETURN_IF_ERROR(ExecLocked("PRAGMA journal_mode=WAL", &mode));
  if (absl::AsciiStrToLower(mode) != "wal") {
    // Still durable with synchronous=FULL, only slower.
    Logger("master")->warn("job store {}: SQLite keeps journal mode '{}' instead of WAL", path_, mode);
  }
  RETURN_IF_ERROR(ExecLocked("PRAGMA synchronous=FULL"));
  RETURN_IF_ERROR(CreateSchemaLocked());
  RETURN_IF_ERROR(PrepareLocked(kUpsert, &upsert_));
  RETURN_IF_ERROR(PrepareLocked(kSelectAll, &select_all_));
  return absl::OkStatus();
}

absl::Status SqliteJobStore::CreateSchemaLocked() {
  // IMMEDIATE takes the write lock first, so two processes opening a new
  // database do not both create it.
  RETURN_IF_ERROR(ExecLocked("BEGIN IMMEDIATE"));
  const absl::Status s = UpgradeSchemaLocked();
  if (!s.ok()) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return s;
  }
  return ExecLocked("COMMIT");
}

absl::Status SqliteJobStore::UpgradeSchemaLocked() {
  std::string text;
  RETURN_IF_ERROR(ExecLocked("PRAGMA user_version", &text));
  int version = 0;
  if (!absl::SimpleAtoi(text, &version)) {
    return absl::DataLossError(absl::StrCat("job store ", path_, ": schema version '", text, "' is not a number"));
  }
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat("job store ", path_, ": schema version ", version,
                                                      " is newer than this master's (", kSchemaVersion,
                                                      "); run a newer weft or use another --state_dir"));
  }
  if (version == kSchemaVersion) return absl::OkStatus();
  RETURN_IF_ERROR(ExecLocked(kCreateTable));
  RETURN_IF_ERROR(ExecLocked(kCreateSeqIndex));
  return ExecLocked(absl::StrCat("PRAGMA user_version = ", kSchemaVersion).c_str());
}

absl::Status SqliteJobStore::PrepareLocked(const char* sql, Statement* stmt) {
  sqlite3_stmt* raw = nullptr;
  const int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
  stmt->reset(raw);
  if (rc != SQLITE_OK) return ErrorLocked(rc, absl::StrCat("sqlite3_prepare_v3(", sql, ")"));
  return absl::OkStatus();
}

absl::Status SqliteJobStore::ExecLocked(const char* sql, std::string* first) {
  Statement stmt;
  RETURN_IF_ERROR(PrepareLocked(sql, &stmt));
  bool first_row = true;
  while (true) {
    const int rc = sqlite3_step(stmt.get());
    if (rc == SQLITE_DONE) return absl::OkStatus();
    if (rc != SQLITE_ROW) return ErrorLocked(rc, absl::StrCat("sqlite3_step(", sql, ")"));
    if (first != nullptr && first_row) {
      const unsigned char* text = sqlite3_column_text(stmt.get(), 0);
      *first = text == nullptr ? "" : reinterpret_cast<const char*>(text);
    }
    first_row = false;
  }
}

absl::Status SqliteJobStore::ErrorLocked(int rc, const std::string& call) const {
  const char* msg = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  const std::string text = absl::StrCat("job store ", path_, ": ", call, ": ", msg);
  const int sys_errno = db_ != nullptr ? sqlite3_system_errno(db_) : 0;
  if ((rc & 0xff) == SQLITE_IOERR && sys_errno != 0) {
    // The OS's reason says more ("Input/output error"), and picks the code
    // as Env does.
    return absl::ErrnoToStatus(sys_errno, text);
  }
  return absl::Status(CodeOf(rc), text);
}

absl::Status SqliteJobStore::CheckOpenLocked() const {
  if (db_ == nullptr) return absl::FailedPreconditionError(absl::StrCat("job store ", path_, " is closed"));
  return absl::OkStatus();
}

absl::Status SqliteJobStore::Put(const JobRecord& record) {
  const std::string& id = record.status.job_id();
  if (id.empty()) return absl::InvalidArgumentError(absl::StrCat("job store ", path_, ": a record without a job id"));
  std::string spec;
  std::string status;
  if (!record.spec.SerializeToString(&spec) || !record.status.SerializeToString(&status)) {
    return absl::InternalError(absl::StrCat("job store ", path_, ": job '", id, "' does not serialize"));
  }
  const int64_t now_ms = Env::Default()->NowMicros() / 1000;

  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckOpenLocked());
  sqlite3_stmt* stmt = upsert_.get();
  ResetOnExit reset(stmt);
  int rc = sqlite3_bind_text64(stmt, 1, id.data(), id.size(), SQLITE_STATIC, SQLITE_UTF8);
  if (rc == SQLITE_OK) rc = sqlite3_bind_blob64(stmt, 2, spec.data(), spec.size(), SQLITE_STATIC);
  if (rc == SQLITE_OK) rc = sqlite3_bind_blob64(stmt, 3, status.data(), status.size(), SQLITE_STATIC);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(stmt, 4, now_ms);
  if (rc != SQLITE_OK) return ErrorLocked(rc, absl::StrCat("sqlite3_bind (job '", id, "')"));
  rc = sqlite3_step(stmt);
  if (rc != SQLITE_DONE) return ErrorLocked(rc, absl::StrCat("sqlite3_step(upsert job '", id, "')"));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JobRecord>> SqliteJobStore::LoadAll() const {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckOpenLocked());
  sqlite3_stmt* stmt = select_all_.get();
  ResetOnExit reset(stmt);
  std::vector<JobRecord> records;
  while (true) {
    const int rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return ErrorLocked(rc, "sqlite3_step(select every job)");
    const std::string id = ColumnBytes(stmt, 0);
    const std::string spec = ColumnBytes(stmt, 1);
    const std::string status = ColumnBytes(stmt, 2);
    JobRecord r;
    r.updated_unix_ms = sqlite3_column_int64(stmt, 3);
    if (!r.spec.ParseFromString(spec)) {
      return absl::DataLossError(absl::StrCat("job store ", path_, ": job '", id, "': its stored JobSpec does not parse"));
    }
    if (!r.status.ParseFromString(status)) {
      return absl::DataLossError(absl::StrCat("job store ", path_, ": job '", id, "': its stored JobStatus does not parse"));
    }
    if (r.status.job_id() != id) {
      return absl::DataLossError(absl::StrCat("job store ", path_, ": job '", id, "': its stored JobStatus is for job '",
                                              r.status.job_id(), "'"));
    }
    records.push_back(std::move(r));
  }
  return records;
}

absl::Status SqliteJobStore::Close() {
  absl::MutexLock lock(&mu_);
  if (db_ == nullptr) return absl::OkStatus();
  // Statements first: a connection with live statements does not close.
  upsert_.reset();
  select_all_.reset();
  // The last connection to close checkpoints the WAL into the database.
  const int rc = sqlite3_close(db_);
  absl::Status s = rc == SQLITE_OK ? absl::OkStatus() : ErrorLocked(rc, "sqlite3_close");
  if (rc != SQLITE_OK) sqlite3_close_v2(db_);  // frees it once nothing uses it
  db_ = nullptr;
  return s;
}

}  // namespace master
}  // namespace weft
