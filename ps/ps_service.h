// GrpcPsService: the ParameterServer gRPC service (proto/ps_service.proto)
// over the callback API, a thin adapter onto PsHandler; and the factory that
// `weft ps` passes to its WorkerServer to serve it beside the WorkerService.
//
// Each method hands its request to the handler and returns the reactor at
// once; the handler's callback finishes it from the I/O pool (SaveShard,
// RestoreShard) or at once (ListShards), so no reaction blocks on the disk.
//
// Thread-safety: thread-safe; `handler` (borrowed) outlives the service and
// the server it is registered with.
#ifndef WEFT_PS_PS_SERVICE_H_
#define WEFT_PS_PS_SERVICE_H_

#include "proto/ps_service.grpc.pb.h"
#include "ps/ps_handler.h"
#include "worker/worker_server.h"

namespace weft {
namespace ps {

// The generated service is weft::ParameterServer.
using GrpcPsServiceBase = ::weft::ParameterServer::WithCallbackMethod_ListShards<
    ::weft::ParameterServer::WithCallbackMethod_SaveShard<
        ::weft::ParameterServer::WithCallbackMethod_RestoreShard<::weft::ParameterServer::Service>>>;

class GrpcPsService final : public GrpcPsServiceBase {
 public:
  // `security` null: insecure. Every method serves only the master.
  explicit GrpcPsService(PsHandler* handler, std::shared_ptr<const TransportSecurity> security = nullptr)
      : handler_(handler), auth_(std::move(security)) {}

  grpc::ServerUnaryReactor* ListShards(grpc::CallbackServerContext* ctx, const ListShardsRequest* request,
                                       ListShardsResponse* response) override;
  grpc::ServerUnaryReactor* SaveShard(grpc::CallbackServerContext* ctx, const SaveShardRequest* request,
                                      SaveShardResponse* response) override;
  grpc::ServerUnaryReactor* RestoreShard(grpc::CallbackServerContext* ctx, const RestoreShardRequest* request,
                                         RestoreShardResponse* response) override;

 private:
  PsHandler* const handler_;
  const PeerAuthenticator auth_;
};

// For WorkerServerOptions::extra_services: a PsHandler on the server's Worker
// and its GrpcPsService. `options.env` (borrowed) outlives the server.
worker::ExtraServiceFactory PsServiceFactory(const PsHandlerOptions& options = PsHandlerOptions());

}  // namespace ps
}  // namespace weft

#endif  // WEFT_PS_PS_SERVICE_H_
