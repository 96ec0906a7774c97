// JobStore: where the master keeps the jobs it has been given.
//
// JobManager writes a job's record at submission and at every change of
// state (not at every progress update), and reads them all when it starts.
// MemoryJobStore keeps them for the life of the process; a durable store
// (SQLite under --state_dir, with the fault-tolerance work) implements the
// same interface so that a restarted master knows its jobs.
//
// Thread-safety: implementations are thread-safe.
#ifndef WEFT_MASTER_JOB_STORE_H_
#define WEFT_MASTER_JOB_STORE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/job.pb.h"
#include "proto/master_service.pb.h"

namespace weft {
namespace master {

struct JobRecord {
  JobSpec spec;
  JobStatus status;  // status.job_id is the key
  // When it was last stored (LoadAll sets it; 0 when the store does not
  // know): for a job found unfinished, about when its master stopped.
  int64_t updated_unix_ms = 0;
};

class JobStoreInterface {
 public:
  virtual ~JobStoreInterface() = default;
  // Inserts or replaces the record with record.status.job_id.
  virtual absl::Status Put(const JobRecord& record) = 0;
  // Every record, in the order first Put.
  virtual absl::StatusOr<std::vector<JobRecord>> LoadAll() const = 0;
};

class MemoryJobStore final : public JobStoreInterface {
 public:
  absl::Status Put(const JobRecord& record) override {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = index_.emplace(record.status.job_id(), records_.size());
    if (inserted) {
      records_.push_back(record);
    } else {
      records_[it->second] = record;
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<JobRecord>> LoadAll() const override {
    absl::MutexLock lock(&mu_);
    return records_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<JobRecord> records_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, size_t> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_JOB_STORE_H_
