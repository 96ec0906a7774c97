// A task's gRPC client of the master: the RegisterWorker call a worker
// started with --master makes (worker/master_registration.h repeats it).
//
// Calls are blocking, each with a deadline. Cancel() ends the call in flight
// and fails every later one, so that an owner stopping at a termination
// signal does not wait out a deadline against a master that does not answer.
//
// The channel tries to reconnect at least every `max_reconnect_backoff`
// (gRPC's default backs off to 2 min): a master that restarts on the same
// address hears from the task within about one registration period.
//
// Thread-safety: thread-safe.
#ifndef WEFT_WORKER_GRPC_REMOTE_MASTER_H_
#define WEFT_WORKER_GRPC_REMOTE_MASTER_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/master_service.grpc.pb.h"

namespace weft {
namespace worker {

class GrpcRemoteMaster {
 public:
  // `target`: "host:port"; `credentials`: the task's own (mTLS), or null
  // for plaintext.
  GrpcRemoteMaster(std::string target, std::shared_ptr<grpc::ChannelCredentials> credentials,
                   absl::Duration max_reconnect_backoff);

  const std::string& target() const { return target_; }

  // One call. A failure keeps the gRPC code (UNAVAILABLE: the master cannot
  // be reached; CANCELLED after Cancel()) and its message names the master:
  // "master at HOST:PORT: RegisterWorker: ...".
  absl::StatusOr<RegisterWorkerResponse> RegisterWorker(const RegisterWorkerRequest& request,
                                                        absl::Duration timeout);

  // Cancels the calls in flight and fails every later call at once.
  // Idempotent.
  void Cancel();

 private:
  absl::Status Failed(const grpc::Status& s) const;

  const std::string target_;
  const std::unique_ptr<MasterService::Stub> stub_;
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // The contexts of the calls in flight; each is owned by its caller's
  // stack frame and removed before that frame ends.
  absl::flat_hash_set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace worker
}  // namespace weft

#endif  // WEFT_WORKER_GRPC_REMOTE_MASTER_H_
