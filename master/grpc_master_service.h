// GrpcMasterService: MasterService over gRPC's callback API, a thin adapter
// that hands each call to a Master handler and finishes the call from the
// handler's callback. WatchJob streams JobStatus messages fed by
// JobManager::Watch: one write in flight at a time, and a status that
// arrives meanwhile replaces any not yet written (the newest wins; the
// terminal status is always the last one written). The stream ends OK after
// the terminal status, NOT_FOUND for an unknown job, and CANCELLED when the
// client goes away.
//
// Every call is authenticated (a user certificate or a bearer token; see
// common/grpc_security.h) and the Master decides what the caller may do.
//
// Thread-safety: thread-safe; `master` must outlive the service and the
// server it is registered with.
#ifndef WEFT_MASTER_GRPC_MASTER_SERVICE_H_
#define WEFT_MASTER_GRPC_MASTER_SERVICE_H_

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_security.h"
#include "common/thread_pool.h"
#include "master/master.h"
#include "proto/master_service.grpc.pb.h"

namespace weft {
namespace master {

class GrpcMasterService final : public MasterService::CallbackService {
 public:
  // `security` null: insecure; `tokens` (may be null) admits bearer-token
  // clients beside certificate ones.
  explicit GrpcMasterService(Master* master, std::shared_ptr<const TransportSecurity> security = nullptr,
                             std::shared_ptr<TokenTable> tokens = nullptr)
      : master_(master), auth_(std::move(security), std::move(tokens)) {}

  grpc::ServerUnaryReactor* CreateSession(grpc::CallbackServerContext* ctx, const CreateSessionRequest* request,
                                          CreateSessionResponse* response) override;
  grpc::ServerUnaryReactor* ExtendSession(grpc::CallbackServerContext* ctx, const ExtendSessionRequest* request,
                                          ExtendSessionResponse* response) override;
  grpc::ServerUnaryReactor* RunStep(grpc::CallbackServerContext* ctx, const RunStepRequest* request,
                                    RunStepResponse* response) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* ctx, const CloseSessionRequest* request,
                                         CloseSessionResponse* response) override;
  grpc::ServerUnaryReactor* ListDevices(grpc::CallbackServerContext* ctx, const ListDevicesRequest* request,
                                        ListDevicesResponse* response) override;
  grpc::ServerUnaryReactor* Reset(grpc::CallbackServerContext* ctx, const ResetRequest* request,
                                  ResetResponse* response) override;
  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx, const SubmitJobRequest* request,
                                      SubmitJobResponse* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const GetJobRequest* request,
                                   JobStatus* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx, const ListJobsRequest* request,
                                     ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx, const CancelJobRequest* request,
                                      CancelJobResponse* response) override;
  grpc::ServerUnaryReactor* ScaleJob(grpc::CallbackServerContext* ctx, const ScaleJobRequest* request,
                                     ScaleJobResponse* response) override;
  grpc::ServerUnaryReactor* RegisterWorker(grpc::CallbackServerContext* ctx, const RegisterWorkerRequest* request,
                                           RegisterWorkerResponse* response) override;
  grpc::ServerUnaryReactor* TraceJob(grpc::CallbackServerContext* ctx, const TraceJobRequest* request,
                                     TraceJobResponse* response) override;
  grpc::ServerUnaryReactor* ReadJobCheckpoint(grpc::CallbackServerContext* ctx, const ReadJobCheckpointRequest* request,
                                              ReadJobCheckpointResponse* response) override;
  grpc::ServerWriteReactor<JobStatus>* WatchJob(grpc::CallbackServerContext* ctx,
                                                const WatchJobRequest* request) override;
  // Client-streamed (master/grpc_upload_reactor.h); any user.
  grpc::ServerReadReactor<UploadDatasetRequest>* UploadDataset(grpc::CallbackServerContext* ctx,
                                                               UploadDatasetResponse* response) override;

  // WatchJob handlers not finished yet. Each finishes once its stream has
  // ended: after the job's terminal status, or when the client cancels or
  // goes away (then it stops watching the job). For tests and monitoring.
  int active_watches() const;
  // True once active_watches() == n, waiting at most `timeout`.
  bool AwaitActiveWatches(int n, absl::Duration timeout) const;

 private:
  void WatchEnded();

  Master* const master_;
  const PeerAuthenticator auth_;
  // Writes uploads to disk off gRPC's threads; joined before the service
  // goes, after the server that drives it has stopped.
  ThreadPool upload_pool_{"upload", 2};
  mutable absl::Mutex mu_;
  int active_watches_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_GRPC_MASTER_SERVICE_H_
