// DatasetCache: where a task keeps the uploaded datasets the master copies
// to it (WorkerService.PutDataset; master/dataset_push.h), free of gRPC.
//
// Under its root (a task's --dataset_cache), `<id>/` holds a dataset's IDX
// files as runtime/data/uploaded_dataset.h describes, and the task's data
// loading reads a DatasetSpec.upload_id from there. A transfer writes into a
// temporary directory (runtime/data/upload_writer.h) and is renamed into
// place only once every byte arrived and the files' SHA-256 gives the id,
// so a dataset directory here is always complete and verified; a transfer
// that fails, or is replaced by a new one for the same id, leaves nothing.
//
// One transfer per id at a time (a new first call restarts it); at most
// kMaxTransfers ids in flight. The master is trusted to send what it
// declared, but every size is checked with overflow-safe arithmetic.
//
// Thread-safety: thread-safe.
#ifndef WEFT_WORKER_DATASET_CACHE_H_
#define WEFT_WORKER_DATASET_CACHE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/confined_root.h"
#include "proto/worker_service.pb.h"
#include "runtime/data/upload_writer.h"

namespace weft {
namespace worker {

class DatasetCache {
 public:
  static constexpr int kMaxTransfers = 4;

  // Opens (creating, 0700) the root and removes interrupted transfers.
  static absl::StatusOr<std::unique_ptr<DatasetCache>> Open(const std::string& root);

  // One PutDataset call (see proto/worker_service.proto). INVALID_ARGUMENT
  // for a bad id, file list or chunk; FAILED_PRECONDITION for a chunk of no
  // transfer or at the wrong offset (the master starts over); DATA_LOSS when
  // the bytes do not give the id.
  absl::Status Put(const PutDatasetRequest& request, PutDatasetResponse* response);

  bool Has(const std::string& id) const;
  const ConfinedRoot& root() const { return root_; }

 private:
  struct Transfer {
    absl::Mutex mu;
    std::unique_ptr<data::UploadWriter> writer ABSL_GUARDED_BY(mu);
    std::vector<DatasetFile> files ABSL_GUARDED_BY(mu);
    int next_file ABSL_GUARDED_BY(mu) = 0;   // files started
    int64_t file_left ABSL_GUARDED_BY(mu) = 0;  // bytes the current file awaits
    int64_t offset ABSL_GUARDED_BY(mu) = 0;  // bytes received
    int64_t total ABSL_GUARDED_BY(mu) = 0;
  };

  explicit DatasetCache(ConfinedRoot root) : root_(std::move(root)) {}
  absl::Status Start(const PutDatasetRequest& request, PutDatasetResponse* response);
  // Feeds `data` to the transfer, starting files as their bytes begin.
  static absl::Status Feed(Transfer* t, absl::string_view data) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu);
  absl::Status Complete(const std::string& id, Transfer* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu);

  const ConfinedRoot root_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Transfer>> transfers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace worker
}  // namespace weft

#endif  // WEFT_WORKER_DATASET_CACHE_H_
