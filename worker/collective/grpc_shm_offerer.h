// GrpcShmOfferer: the data plane's gRPC calls to peers, over the cluster's
// authenticated channels (one per peer address, opened on first use): it
// offers shared-memory rings (CollectiveService.AttachShm) and asks for a
// peer's socket port (CollectiveService.SocketEndpoint).
//
// Thread-safety: thread-safe. Outlives the offers it made: destroy it after
// the transport that uses it.
#ifndef WEFT_WORKER_COLLECTIVE_GRPC_SHM_OFFERER_H_
#define WEFT_WORKER_COLLECTIVE_GRPC_SHM_OFFERER_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/collective_service.grpc.pb.h"
#include "worker/collective/shm_offer.h"
#include "worker/collective/socket_collective_transport.h"

namespace weft {
namespace collective {

class GrpcShmOfferer final : public ShmOffererInterface, public SocketEndpointsInterface {
 public:
  // `credentials`: the process's TLS credentials (null: plaintext).
  explicit GrpcShmOfferer(std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr)
      : credentials_(std::move(credentials)) {}

  std::function<void()> OfferAsync(const std::string& address, const AttachShmRequest& request,
                                   absl::Duration timeout,
                                   std::function<void(absl::StatusOr<AttachShmResponse>)> done) override;
  absl::StatusOr<int> SocketPort(const std::string& address, absl::Duration timeout) override;

 private:
  CollectiveService::Stub* StubFor(const std::string& address);

  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<CollectiveService::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_GRPC_SHM_OFFERER_H_
