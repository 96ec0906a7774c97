// DatasetUploads: the master's store of datasets clients uploaded
// (MasterService.UploadDataset), free of gRPC.
//
// Datasets live under the master's --upload_root as runtime/data's
// uploaded_dataset.h describes, content-addressed: `<root>/<id>/` holds the
// IDX files and OWNERS, the users who uploaded those bytes (one a line).
// An upload streams into a temporary directory (runtime/data/upload_writer.h)
// that is renamed into place only once every file is complete and its IDX
// headers agree; the same bytes uploaded again keep the stored copy (the
// uploader becomes an owner, the id is answered, nothing more is kept).
//
// Limits, checked with overflow-safe arithmetic before a byte is written:
//  - max_upload_bytes: the sizes an upload declares, together;
//  - quota_bytes: what one owner's datasets hold, counting uploads in flight
//    (each dataset counts in full for each of its owners);
//  - kMaxUploadsInFlight uploads at once.
// Refusals: INVALID_ARGUMENT for a malformed upload, RESOURCE_EXHAUSTED for a
// limit, each naming the file and the limit.
//
// Thread-safety: thread-safe. An Upload is fed by one thread at a time.
#ifndef WEFT_MASTER_DATASET_UPLOADS_H_
#define WEFT_MASTER_DATASET_UPLOADS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/caller.h"
#include "common/confined_root.h"
#include "proto/master_service.pb.h"
#include "runtime/data/upload_writer.h"

namespace weft {
namespace master {

struct DatasetUploadsOptions {
  std::string root;                                  // created 0700 when missing
  int64_t max_upload_bytes = int64_t{2} << 30;       // `--max_upload_bytes`
  int64_t quota_bytes = int64_t{10} << 30;           // `--upload_quota_bytes`, per owner
};

class DatasetUploads {
 public:
  static constexpr int kMaxUploadsInFlight = 8;

  // Opens (creating) the root, removes what interrupted uploads left and
  // indexes the datasets there.
  static absl::StatusOr<std::unique_ptr<DatasetUploads>> Open(const DatasetUploadsOptions& options);

  // One upload in progress; destroying it unfinished removes everything it
  // wrote and releases its share of the quota.
  class Upload {
   public:
    ~Upload();
    // The next message of the stream, in order.
    absl::Status OnMessage(const UploadDatasetRequest& message);
    // The stream ended: checks, stores, answers.
    absl::StatusOr<UploadDatasetResponse> Finish();

   private:
    friend class DatasetUploads;
    Upload(DatasetUploads* store, std::string owner, std::unique_ptr<data::UploadWriter> writer)
        : store_(store), owner_(std::move(owner)), writer_(std::move(writer)) {}
    DatasetUploads* const store_;  // outlives the upload
    const std::string owner_;
    std::unique_ptr<data::UploadWriter> writer_;
    std::string file_;        // the file receiving data
    int files_ = 0;
    int64_t reserved_ = 0;    // quota held by this upload
  };

  // A new upload by `caller` (any user: RequireUser).
  absl::StatusOr<std::unique_ptr<Upload>> Begin(const Caller& caller);

  // OK when `caller` may train on dataset `id`: an owner, an admin, or an
  // insecure master. INVALID_ARGUMENT for a malformed id; PERMISSION_DENIED
  // naming the id otherwise (an unknown id too, so ids are not probed).
  absl::Status Authorize(const Caller& caller, const std::string& id) const;

  // The stored dataset's files, canonical order, for copying to tasks.
  absl::StatusOr<std::vector<data::UploadedFileDigest>> Files(const std::string& id) const;
  const ConfinedRoot& root() const { return root_; }
  // Bytes the owner's datasets hold (for tests and monitoring).
  int64_t OwnerBytes(const std::string& owner) const;

 private:
  struct Stored {
    int64_t bytes = 0;
    std::set<std::string> owners;
  };
  DatasetUploads(ConfinedRoot root, const DatasetUploadsOptions& options) : root_(std::move(root)), options_(options) {}
  void Index();
  // Grows `upload`'s reservation by `bytes`, or says which limit it breaks.
  absl::Status Reserve(Upload* upload, const std::string& file, int64_t bytes);
  void Release(Upload* upload);
  int64_t OwnerBytesLocked(const std::string& owner) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records the stored dataset and its new owner; rewrites OWNERS.
  absl::Status AddOwner(const std::string& id, int64_t bytes, const std::string& owner);

  const ConfinedRoot root_;
  const DatasetUploadsOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Stored> stored_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> reserved_ ABSL_GUARDED_BY(mu_);  // owner -> bytes in flight
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_DATASET_UPLOADS_H_
