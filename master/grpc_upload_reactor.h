// UploadDatasetReactor: MasterService.UploadDataset's server side, a
// client-streaming call over gRPC's callback API. Each message is handed to
// an I/O pool, which feeds it to the DatasetUploads::Upload (writing it to
// disk) and only then asks for the next one: one message in memory at a
// time, no disk I/O inside a reaction. When the client has sent everything,
// the pool finishes the upload (checks, rename) and the call. A refused
// message or a cancelled call ends the upload, which removes what it wrote.
//
// Thread-safety: gRPC and the pool take turns (one read or one pool task at
// a time); the reactor deletes itself in OnDone.
#ifndef WEFT_MASTER_GRPC_UPLOAD_REACTOR_H_
#define WEFT_MASTER_GRPC_UPLOAD_REACTOR_H_

#include <atomic>
#include <memory>
#include <string>

#include "common/thread_pool.h"
#include "grpcpp/grpcpp.h"
#include "master/dataset_uploads.h"
#include "proto/master_service.pb.h"

namespace weft {
namespace master {

class UploadDatasetReactor final : public grpc::ServerReadReactor<UploadDatasetRequest> {
 public:
  // A call refused before it starts.
  explicit UploadDatasetReactor(const grpc::Status& refused) { Finish(refused); }
  // `pool` outlives the reactor; `who` and `peer` name the caller in logs.
  UploadDatasetReactor(std::unique_ptr<DatasetUploads::Upload> upload, UploadDatasetResponse* response,
                       ThreadPool* pool, std::string who, std::string peer);

  void OnReadDone(bool ok) override;
  void OnCancel() override { cancelled_.store(true); }
  void OnDone() override { delete this; }

 private:
  // On the pool: the upload is over, with `s` (OK: the stream ended).
  void End(absl::Status s);

  std::unique_ptr<DatasetUploads::Upload> upload_;
  UploadDatasetResponse* response_ = nullptr;
  ThreadPool* pool_ = nullptr;
  const std::string who_;
  const std::string peer_;
  UploadDatasetRequest request_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_GRPC_UPLOAD_REACTOR_H_
