// PushDataset: copies an uploaded dataset from the master's store
// (master/dataset_uploads.h) to the tasks that read it, through
// WorkerService.PutDataset, before a job's attempt starts.
//
// Per task: a first call names the files and carries no bytes; a task that
// already holds the id (verified when it stored it) answers `present` and
// gets nothing more. Otherwise the files follow in kChunkBytes chunks, in
// the id's canonical order, read from disk one chunk at a time; the task
// checks the SHA-256 against the id before keeping them. Tasks are served
// one after another (a task stores the bytes while the next one waits).
//
// Thread-safety: thread-safe; blocks its caller (a job's runner thread).
#ifndef WEFT_MASTER_DATASET_PUSH_H_
#define WEFT_MASTER_DATASET_PUSH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "master/dataset_uploads.h"
#include "master/worker_cache.h"

namespace weft {
namespace master {

inline constexpr int64_t kDatasetChunkBytes = int64_t{1} << 20;

// Errors name the task and the dataset; a task that cannot take datasets
// answers UNIMPLEMENTED or FAILED_PRECONDITION, passed on.
absl::Status PushDataset(const DatasetUploads& uploads, const std::string& id, WorkerCacheInterface* workers,
                         const std::vector<std::string>& tasks);

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_DATASET_PUSH_H_
