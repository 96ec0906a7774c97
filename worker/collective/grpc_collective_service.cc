#include "worker/collective/grpc_collective_service.h"

#include <utility>

#include "common/grpc_util.h"
#include "common/peer_metrics.h"
#include "worker/collective/grpc_chunk_coding.h"
#include "worker/collective/grpc_collective_transport.h"

namespace weft {
namespace collective {
namespace {

class ExchangeReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // `sender`: the authenticated task at the other end ("" insecure).
  ExchangeReactor(CollectiveMailbox* mailbox, std::string sender)
      : mailbox_(mailbox), sender_(std::move(sender)), received_(PeerTraffic(sender_, "collective").received) {
    StartRead(&message_);
  }
  // A stream refused before reading anything.
  explicit ExchangeReactor(const grpc::Status& refused) : mailbox_(nullptr) { Finish(refused); }

  void OnReadDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::OK);  // the sender closed the stream (or it broke)
    received_->Increment(static_cast<double>(message_.Length()));
    auto decoded = DecodeChunk(&message_);
    if (!decoded.ok()) return Finish(ToGrpcStatus(decoded.status()));
    // A chunk over the mailbox's quota ends the stream: the sender's sends
    // fail with the reason, and nothing of it is kept here.
    absl::Status delivered = mailbox_->Deliver(decoded->first, std::move(decoded->second), sender_);
    if (!delivered.ok()) return Finish(ToGrpcStatus(delivered));
    StartRead(&message_);
  }
  void OnDone() override { delete this; }

 private:
  CollectiveMailbox* const mailbox_;
  const std::string sender_;
  metrics::Counter* const received_ = nullptr;
  grpc::ByteBuffer message_;
};

// The caller of a unary call that cluster members alone may make; a refusal
// has finished `reactor` with its status.
absl::StatusOr<Caller> ClusterCaller(const PeerAuthenticator& auth, grpc::CallbackServerContext* ctx,
                                     const char* what, grpc::ServerUnaryReactor* reactor) {
  absl::StatusOr<Caller> caller =
      Authorize(auth, *ctx, what, [&](const Caller& c) { return RequireClusterMember(c, what); });
  if (!caller.ok()) reactor->Finish(ToGrpcStatus(caller.status()));
  return caller;
}

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* GrpcCollectiveService::Exchange(
    grpc::CallbackServerContext* ctx) {
  constexpr char kWhat[] = "CollectiveService.Exchange";
  absl::StatusOr<Caller> caller =
      Authorize(auth_, *ctx, kWhat, [&](const Caller& c) { return RequireClusterMember(c, kWhat); });
  if (!caller.ok()) return new ExchangeReactor(ToGrpcStatus(caller.status()));
  return new ExchangeReactor(mailbox_, caller->name);
}

grpc::ServerUnaryReactor* GrpcCollectiveService::AttachShm(grpc::CallbackServerContext* ctx,
                                                          const AttachShmRequest* request,
                                                          AttachShmResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<Caller> caller = ClusterCaller(auth_, ctx, "CollectiveService.AttachShm", reactor);
  if (!caller.ok()) return reactor;
  if (!attach_) {
    reactor->Finish(ToGrpcStatus(absl::FailedPreconditionError("shared-memory transport is off on this task")));
    return reactor;
  }
  absl::StatusOr<AttachShmResponse> attached = attach_(caller->name, *request);
  if (attached.ok()) *response = std::move(*attached);
  reactor->Finish(ToGrpcStatus(attached.status()));
  return reactor;
}

grpc::ServerUnaryReactor* GrpcCollectiveService::SocketEndpoint(grpc::CallbackServerContext* ctx,
                                                               const SocketEndpointRequest* /*request*/,
                                                               SocketEndpointResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (!ClusterCaller(auth_, ctx, "CollectiveService.SocketEndpoint", reactor).ok()) return reactor;
  if (socket_port_ == 0) {
    reactor->Finish(ToGrpcStatus(absl::FailedPreconditionError("the socket transport is off on this task")));
    return reactor;
  }
  response->set_port(socket_port_);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void ConfigureCollectiveServer(grpc::ServerBuilder* builder) {
  for (const auto& [key, value] : BulkTransferChannelArgs()) builder->AddChannelArgument(key, value);
}

}  // namespace collective
}  // namespace weft
