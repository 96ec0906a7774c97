#include "master/grpc_upload_reactor.h"

#include <utility>

#include "common/grpc_util.h"
#include "common/logging.h"

namespace weft {
namespace master {

UploadDatasetReactor::UploadDatasetReactor(std::unique_ptr<DatasetUploads::Upload> upload,
                                           UploadDatasetResponse* response, ThreadPool* pool, std::string who,
                                           std::string peer)
    : upload_(std::move(upload)), response_(response), pool_(pool), who_(std::move(who)), peer_(std::move(peer)) {
  StartRead(&request_);
}

void UploadDatasetReactor::OnReadDone(bool ok) {
  if (!ok) {  // the client sent everything (or went away: cancelled_)
    pool_->Schedule([this] { End(absl::OkStatus()); });
    return;
  }
  pool_->Schedule([this] {
    absl::Status s = cancelled_.load() ? absl::CancelledError("the client cancelled the upload")
                                       : upload_->OnMessage(request_);
    request_.Clear();
    if (!s.ok()) return End(s);
    StartRead(&request_);
  });
}

void UploadDatasetReactor::End(absl::Status s) {
  if (s.ok() && cancelled_.load()) s = absl::CancelledError("the client cancelled the upload");
  if (s.ok()) {
    absl::StatusOr<UploadDatasetResponse> r = upload_->Finish();
    if (r.ok()) *response_ = *std::move(r);
    s = r.status();
  }
  upload_.reset();  // an upload not stored removes its files here
  if (!s.ok()) {
    Logger("master")->warn("upload by {} at {} refused: {}", who_, peer_, s.ToString());
  }
  Finish(ToGrpcStatus(s));  // the last use of this reactor
}

}  // namespace master
}  // namespace weft
