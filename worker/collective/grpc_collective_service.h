// GrpcCollectiveService: the receiving end of collective chunks, a thin gRPC
// adapter that decodes each chunk of an Exchange stream (chunk_coding.h) and
// delivers it, still in gRPC's slices, to a CollectiveMailbox.
//
// Register it on any grpc::ServerBuilder (the worker server's, or a server
// of its own in tests and benchmarks):
//
//   CollectiveMailbox mailbox;
//   GrpcCollectiveService service(&mailbox);
//   grpc::ServerBuilder builder;
//   ConfigureServer(&builder);            // common/grpc_util.h
//   ConfigureCollectiveServer(&builder);  // bulk-transfer HTTP/2 settings
//   builder.RegisterService(&service);
//
// Each stream's reactor reads one chunk at a time and hands it over; it never
// blocks, though a waiting collective may sum the chunk on this thread before
// the next read starts (CollectiveExecutor). A malformed chunk ends the stream
// with DATA_LOSS.
//
// Only cluster members may open a stream; each chunk is delivered under
// the identity of the task that sent it (its certificate), so the mailbox
// (built with check_senders) hands a receive only the chunk of the task the
// group expects at that rank.
//
// Thread-safety: thread-safe; `mailbox` (borrowed) outlives the service and
// the server it is registered with.
#ifndef WEFT_WORKER_COLLECTIVE_GRPC_COLLECTIVE_SERVICE_H_
#define WEFT_WORKER_COLLECTIVE_GRPC_COLLECTIVE_SERVICE_H_

#include <functional>
#include <memory>
#include <string>

#include "common/grpc_security.h"
#include "grpcpp/grpcpp.h"
#include "proto/collective_service.grpc.pb.h"
#include "worker/collective/collective_mailbox.h"

namespace weft {
namespace collective {

class GrpcCollectiveService final
    : public CollectiveService::WithCallbackMethod_SocketEndpoint<CollectiveService::WithCallbackMethod_AttachShm<
          CollectiveService::WithRawCallbackMethod_Exchange<CollectiveService::Service>>> {
 public:
  // Takes a ring a peer offers (ShmCollectiveTransport::Attach): `caller`
  // is the peer's authenticated identity ("" insecure).
  using AttachHandler =
      std::function<absl::StatusOr<AttachShmResponse>(const std::string& caller, const AttachShmRequest& request)>;

  // `security` null: insecure.
  explicit GrpcCollectiveService(CollectiveMailbox* mailbox,
                                 std::shared_ptr<const TransportSecurity> security = nullptr)
      : mailbox_(mailbox), auth_(std::move(security)) {}

  // Without one (the default), AttachShm answers FAILED_PRECONDITION and
  // peers keep to Exchange. Set it before the server starts.
  void SetAttachHandler(AttachHandler handler) { attach_ = std::move(handler); }
  // The port SocketEndpoint answers (0, the default: FAILED_PRECONDITION,
  // and peers keep to Exchange). Set it before the server starts.
  void SetSocketPort(int port) { socket_port_ = port; }

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Exchange(grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* AttachShm(grpc::CallbackServerContext* ctx, const AttachShmRequest* request,
                                      AttachShmResponse* response) override;
  grpc::ServerUnaryReactor* SocketEndpoint(grpc::CallbackServerContext* ctx, const SocketEndpointRequest* request,
                                           SocketEndpointResponse* response) override;

 private:
  CollectiveMailbox* const mailbox_;
  const PeerAuthenticator auth_;
  AttachHandler attach_;
  int socket_port_ = 0;
};

// Server-side HTTP/2 settings for bulk chunks (frame size, flow-control
// window). They apply to every service on the server; all are harmless to
// small RPCs.
void ConfigureCollectiveServer(grpc::ServerBuilder* builder);

}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_GRPC_COLLECTIVE_SERVICE_H_
