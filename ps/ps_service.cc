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
  PsExtraService(worker::Worker* worker, const PsHandlerOptions& options)
      : handler_(worker, options), service_(&handler_) {}

  grpc::Service* service() override { return &service_; }
  void Shutdown() override { handler_.Shutdown(); }

 private:
  PsHandler handler_;
  GrpcPsService service_;  // declared after the handler it borrows
};

}  // namespace

grpc::ServerUnaryReactor* GrpcPsService::ListShards(grpc::CallbackServerContext* ctx,
                                                    const ListShardsRequest* request, ListShardsResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  handler_->ListShardsAsync(request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* GrpcPsService::SaveShard(grpc::CallbackServerContext* ctx, const SaveShardRequest* request,
                                                   SaveShardResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  handler_->SaveShardAsync(request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* GrpcPsService::RestoreShard(grpc::CallbackServerContext* ctx,
                                                      const RestoreShardRequest* request,
                                                      RestoreShardResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  handler_->RestoreShardAsync(request, response, FinishWith(reactor));
  return reactor;
}

worker::ExtraServiceFactory PsServiceFactory(const PsHandlerOptions& options) {
  return [options](worker::Worker* worker) -> std::unique_ptr<worker::ExtraService> {
    return std::make_unique<PsExtraService>(worker, options);
  };
}

}  // namespace ps
}  // namespace weft
