#include "worker/collective/grpc_collective_service.h"

#include <utility>

#include "common/grpc_util.h"
#include "worker/collective/chunk_coding.h"
#include "worker/collective/grpc_collective_transport.h"

namespace weft {
namespace collective {
namespace {

class ExchangeReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit ExchangeReactor(CollectiveMailbox* mailbox) : mailbox_(mailbox) { StartRead(&message_); }

  void OnReadDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::OK);  // the sender closed the stream (or it broke)
    auto decoded = DecodeChunk(&message_);
    if (!decoded.ok()) return Finish(ToGrpcStatus(decoded.status()));
    mailbox_->Deliver(decoded->first, std::move(decoded->second));
    StartRead(&message_);
  }
  void OnDone() override { delete this; }

 private:
  CollectiveMailbox* const mailbox_;
  grpc::ByteBuffer message_;
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* GrpcCollectiveService::Exchange(
    grpc::CallbackServerContext*) {
  return new ExchangeReactor(mailbox_);
}

void ConfigureCollectiveServer(grpc::ServerBuilder* builder) {
  for (const auto& [key, value] : BulkTransferChannelArgs()) builder->AddChannelArgument(key, value);
}

}  // namespace collective
}  // namespace weft
