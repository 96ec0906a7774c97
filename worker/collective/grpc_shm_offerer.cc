#include "worker/collective/grpc_shm_offerer.h"

#include <utility>

#include "common/grpc_util.h"

namespace weft {
namespace collective {
namespace {

struct OfferCall {
  grpc::ClientContext ctx;
  AttachShmRequest request;
  AttachShmResponse response;
};

}  // namespace

CollectiveService::Stub* GrpcShmOfferer::StubFor(const std::string& address) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<CollectiveService::Stub>& stub = stubs_[address];
  if (stub == nullptr) stub = CollectiveService::NewStub(NewChannel(address, credentials_));
  return stub.get();
}

std::function<void()> GrpcShmOfferer::OfferAsync(const std::string& address, const AttachShmRequest& request,
                                                 absl::Duration timeout,
                                                 std::function<void(absl::StatusOr<AttachShmResponse>)> done) {
  auto call = std::make_shared<OfferCall>();
  call->request = request;
  call->ctx.set_wait_for_ready(true);  // the peer may not be serving yet
  SetDeadline(&call->ctx, timeout);
  StubFor(address)->async()->AttachShm(&call->ctx, &call->request, &call->response,
                                       [call, address, done = std::move(done)](grpc::Status s) {
                                         if (!s.ok()) return done(FromGrpcStatus(s, address));
                                         done(std::move(call->response));
                                       });
  return [call] { call->ctx.TryCancel(); };
}

}  // namespace collective
}  // namespace weft
