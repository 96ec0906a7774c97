#include "worker/collective/grpc_shm_offerer.h"

#include <utility>

#include "absl/strings/str_cat.h"
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

absl::StatusOr<int> GrpcShmOfferer::SocketPort(const std::string& address, absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_wait_for_ready(true);  // the peer may not be serving yet
  SetDeadline(&ctx, timeout);
  SocketEndpointRequest request;
  SocketEndpointResponse response;
  grpc::Status s = StubFor(address)->SocketEndpoint(&ctx, request, &response);
  if (!s.ok()) return FromGrpcStatus(s, address);
  if (response.port() <= 0 || response.port() > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("task at ", address, " answered socket port ", response.port()));
  }
  return response.port();
}

}  // namespace collective
}  // namespace weft
