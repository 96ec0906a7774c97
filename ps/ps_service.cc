#include "ps/ps_service.h"

#include <memory>

#include "common/grpc_util.h"

namespace weft {
namespace ps {
namespace {

StatusCallback FinishWith(grpc::ServerUnaryReactor* reactor) {
  return [reactor](const absl::Status& s) { reactor->Finish(ToGrpcStatus(s)); };
}

// Owns the handler and the service, in that order of construction; the
// WorkerServer calls Shutdown before it stops the gRPC server.
class PsExtraService final : public worker::ExtraService {
 public:
  PsExtraService(worker::Worker* worker, const PsHandlerOptions& options,
                 std::shared_ptr<const TransportSecurity> security)
      : handler_(worker, options), service_(&handler_, std::move(security)) {}

  grpc::Service* service() override { return &service_; }
  void Shutdown() override { handler_.Shutdown(); }

 private:
  PsHandler handler_;
  GrpcPsService service_;  // declared after the handler it borrows
};

// Refuses every caller but the master; true when the call may go on.
bool Admit(grpc::CallbackServerContext* ctx, const PeerAuthenticator& auth, const char* what,
           grpc::ServerUnaryReactor* reactor) {
  absl::StatusOr<Caller> caller = Authorize(auth, *ctx, what, [what](const Caller& c) { return RequireMaster(c, what); });
  if (caller.ok()) return true;
  reactor->Finish(ToGrpcStatus(caller.status()));
  return false;
}

}  // namespace

grpc::ServerUnaryReactor* GrpcPsService::ListShards(grpc::CallbackServerContext* ctx,
                                                    const ListShardsRequest* request, ListShardsResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (!Admit(ctx, auth_, "ParameterServer.ListShards", reactor)) return reactor;
  handler_->ListShardsAsync(request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* GrpcPsService::SaveShard(grpc::CallbackServerContext* ctx, const SaveShardRequest* request,
                                                   SaveShardResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (!Admit(ctx, auth_, "ParameterServer.SaveShard", reactor)) return reactor;
  handler_->SaveShardAsync(request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* GrpcPsService::RestoreShard(grpc::CallbackServerContext* ctx,
                                                      const RestoreShardRequest* request,
                                                      RestoreShardResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (!Admit(ctx, auth_, "ParameterServer.RestoreShard", reactor)) return reactor;
  handler_->RestoreShardAsync(request, response, FinishWith(reactor));
  return reactor;
}

worker::ExtraServiceFactory PsServiceFactory(const PsHandlerOptions& options) {
  return [options](worker::Worker* worker,
                   std::shared_ptr<const TransportSecurity> security) -> std::unique_ptr<worker::ExtraService> {
    return std::make_unique<PsExtraService>(worker, options, std::move(security));
  };
}

}  // namespace ps
}  // namespace weft
