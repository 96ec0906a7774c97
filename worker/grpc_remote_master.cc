#include "worker/grpc_remote_master.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"

namespace weft {
namespace worker {
namespace {

// NewChannel's arguments, with reconnect attempts no further apart than
// `max_backoff` (at least 1 s: gRPC's own first backoff).
std::shared_ptr<grpc::Channel> MasterChannel(const std::string& target,
                                             std::shared_ptr<grpc::ChannelCredentials> credentials,
                                             absl::Duration max_backoff) {
  grpc::ChannelArguments args = ChannelArgs();
  const int64_t backoff_ms = std::clamp<int64_t>(absl::ToInt64Milliseconds(max_backoff), 1000, 120000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(backoff_ms));
  if (credentials == nullptr) credentials = grpc::InsecureChannelCredentials();
  return grpc::CreateCustomChannel(target, credentials, args);
}

}  // namespace

GrpcRemoteMaster::GrpcRemoteMaster(std::string target, std::shared_ptr<grpc::ChannelCredentials> credentials,
                                   absl::Duration max_reconnect_backoff)
    : target_(std::move(target)),
      stub_(MasterService::NewStub(MasterChannel(target_, std::move(credentials), max_reconnect_backoff))) {}

absl::StatusOr<RegisterWorkerResponse> GrpcRemoteMaster::RegisterWorker(const RegisterWorkerRequest& request,
                                                                        absl::Duration timeout) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return Failed(grpc::Status(grpc::StatusCode::CANCELLED, "the registration is stopping"));
    in_flight_.insert(&ctx);
  }
  RegisterWorkerResponse response;
  const grpc::Status s = stub_->RegisterWorker(&ctx, request, &response);
  {
    absl::MutexLock lock(&mu_);
    in_flight_.erase(&ctx);
  }
  if (!s.ok()) return Failed(s);
  return response;
}

void GrpcRemoteMaster::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  // TryCancel is safe while the call runs on another thread; the context
  // stays alive until its caller takes it out of in_flight_ under mu_.
  for (grpc::ClientContext* ctx : in_flight_) ctx->TryCancel();
}

absl::Status GrpcRemoteMaster::Failed(const grpc::Status& s) const {
  return absl::Status(FromGrpcStatus(s).code(),
                      absl::StrCat("master at ", target_, ": RegisterWorker: ", s.error_message()));
}

}  // namespace worker
}  // namespace weft
